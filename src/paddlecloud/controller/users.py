"""Users and API tokens. Tokens are random (``secrets``) and stored only as their SHA-256.

Managing users (list, create, issue a new token, grant or revoke admin, delete) is for admins:
:func:`require_admin` is the one place that decides, and every admin-only operation (here and in
``JobService``) calls it first, so a non-admin learns nothing (not even whether a user exists) from
an admin endpoint.

The platform always keeps an admin: nobody revokes their own admin status or deletes themselves
(``own_account``: another admin must), so the caller, an admin, remains one; and both changes
re-check, under a lock (the admins' rows locked ``FOR UPDATE`` on PostgreSQL, a process lock beside
it), that the caller is still an admin, so two admins revoking each other at once cannot leave none
(the second finds itself revoked: ``forbidden``).

Deleting a user (``delete``)::

    active jobs (Queued, Starting, Running)? ── not force ──▶ 409 user_has_jobs (names them)
    lock the account out (a new token nobody sees; no longer admin), commit
    every job of the user: the active ones killed at once (force: their grace periods overlap), then
    each record with its logs, tasks and package removed
    PFS home: kept (admins still read it at /pfs/<dc>/home/NAME) or, with delete_files, deleted
    their SampleSets marked deleting (the SampleSet loop unmounts and removes them)
    the user row removed (its name is free again: a new user of that name gets a kept home)
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from sqlalchemy import Select, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, NotFound, Unauthorized
from paddlecloud.api.models import TokenView, UserCreate, UserList, UserView
from paddlecloud.api.users import UserDeleted
from paddlecloud.controller.config import ComputeLimits
from paddlecloud.core.clock import Clock
from paddlecloud.core.phases import TERMINAL_PHASES
from paddlecloud.store.tables import JobRow, SampleSetRow, UserRow

if TYPE_CHECKING:  # the services a deletion goes through (they import this module)
    from paddlecloud.controller.files import FileService
    from paddlecloud.controller.jobs import JobService

__all__ = ["Identity", "UserDirectory", "require_admin"]

#: rounds of removing a deleted user's jobs (a submit that raced the lock-out is found by the next)
_ROUNDS = 3


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> str:
    return "pc_" + secrets.token_urlsafe(32)


class Identity:
    __slots__ = ("is_admin", "name")

    def __init__(self, name: str, is_admin: bool) -> None:
        self.name = name
        self.is_admin = is_admin


def require_admin(who: Identity, what: str) -> None:
    """Raise ``Forbidden`` (code ``forbidden``) unless ``who`` is an admin; ``what`` names the action."""
    if not who.is_admin:
        raise Forbidden(f"{what} is for admins only; user {who.name!r} is not one", code=ErrorCode.FORBIDDEN)


def _not_found(name: str) -> NotFound:
    return NotFound(f"user {name!r} not found (see: paddlecloud admin users)", code=ErrorCode.USER_NOT_FOUND)


def _own_account(what: str) -> Conflict:
    return Conflict(
        f"you cannot {what} your own account: you would lock yourself out; ask another admin to do it",
        code=ErrorCode.OWN_ACCOUNT,
        field="name",
    )


class UserDirectory:
    def __init__(self, clock: Clock, default_quota: ComputeLimits | None = None) -> None:
        self.clock = clock
        self.default_quota = default_quota or ComputeLimits()
        #: serialises admin changes and deletions in this process (the database locks do it across)
        self._admin_lock = threading.Lock()

    def _new_row(self, name: str, token: str, admin: bool) -> UserRow:
        """A new user; non-admins start with the platform's default compute quota."""
        q = ComputeLimits() if admin else self.default_quota
        return UserRow(
            name=name, token_sha256=_hash(token), is_admin=admin, created_at=self.clock.now(),
            cpu_quota_m=q.cpu_m, memory_quota=q.memory, gpu_quota=q.gpu,
        )  # fmt: skip

    def create_or_rotate(self, session: Session, name: str, *, admin: bool = False) -> str:
        """Create ``name`` (or give it a new token); returns the token, which is never stored.

        The platform's own bootstrap (``paddlecloud up``, tests); requests go through :meth:`create`
        and :meth:`rotate`, which check the caller."""
        token = _new_token()
        row = session.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            session.add(self._new_row(name, token, admin))
        else:
            row.token_sha256 = _hash(token)
        session.commit()
        return token

    def authenticate(self, session: Session, token: str | None) -> Identity:
        if not token:
            raise Unauthorized("no API token: run `paddlecloud up` (local) or `paddlecloud login`")
        row = session.scalar(select(UserRow).where(UserRow.token_sha256 == _hash(token)))
        if row is None:
            raise Unauthorized("API token not recognised: it may have been rotated; log in again")
        return Identity(row.name, row.is_admin)

    # -- requests -------------------------------------------------------------------------------

    def whoami(self, who: Identity) -> UserView:
        return UserView(name=who.name, is_admin=who.is_admin)

    def list_users(self, session: Session, who: Identity) -> UserList:
        require_admin(who, "listing users")
        rows = session.scalars(select(UserRow).order_by(UserRow.name)).all()
        return UserList(items=[UserView(name=r.name, is_admin=r.is_admin) for r in rows])

    def create(self, session: Session, who: Identity, spec: UserCreate) -> TokenView:
        """A new user and its first token (returned once). ``user_exists`` if the name is taken."""
        require_admin(who, "creating users")
        exists = Conflict(
            f"user {spec.name!r} already exists; issue a new token with "
            f"`paddlecloud admin rotate-token {spec.name}`",
            code=ErrorCode.USER_EXISTS,
            field="name",
        )
        if session.scalar(select(UserRow.id).where(UserRow.name == spec.name)) is not None:
            raise exists
        token = _new_token()
        session.add(self._new_row(spec.name, token, spec.admin))
        try:
            session.commit()
        except IntegrityError:  # created concurrently
            session.rollback()
            raise exists from None
        return TokenView(name=spec.name, token=token)

    def rotate(self, session: Session, who: Identity, name: str) -> TokenView:
        """Give ``name`` a new token; the old one stops working at once. ``user_not_found`` if missing."""
        require_admin(who, "issuing tokens")
        row = session.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            raise _not_found(name)
        token = _new_token()
        row.token_sha256 = _hash(token)
        session.commit()
        return TokenView(name=name, token=token)

    # -- admin status and deletion ----------------------------------------------------------------

    @staticmethod
    def _locked_user(session: Session, who: Identity, name: str) -> UserRow:
        """The user ``name``, with it and every admin row-locked; ``who`` must still be an admin (an
        admin whose status was revoked a moment ago by someone else acts no more)."""
        admins = list(session.scalars(select(UserRow).where(UserRow.is_admin.is_(True)).with_for_update()))
        if who.name not in {a.name for a in admins}:
            raise Forbidden(f"user {who.name!r} is no longer an admin", code=ErrorCode.FORBIDDEN)
        row = session.scalar(select(UserRow).where(UserRow.name == name).with_for_update())
        if row is None:
            raise _not_found(name)
        return row

    def set_admin(self, session: Session, who: Identity, name: str, admin: bool) -> UserView:
        """Grant (``admin``) or revoke admin status. Quotas stay as they are (``admin set-quota``)."""
        require_admin(who, "granting or revoking admin")
        if name == who.name and not admin:
            raise _own_account("revoke admin from")
        with self._admin_lock:
            row = self._locked_user(session, who, name)
            row.is_admin = admin
            session.commit()
        return UserView(name=row.name, is_admin=row.is_admin)

    def delete(
        self, who: Identity, name: str, *, jobs: JobService, files: FileService, force: bool = False,
        delete_files: bool = False,
    ) -> UserDeleted:  # fmt: skip
        """Delete user ``name`` (module doc): their jobs go, their home stays unless ``delete_files``."""
        require_admin(who, "deleting users")
        if name == who.name:
            raise _own_account("delete")
        with self._admin_lock, jobs.ctx.session() as s:
            row = self._locked_user(s, who, name)
            active = list(s.scalars(self._jobs_of(name).where(JobRow.phase.not_in(TERMINAL_PHASES))))
            if active and not force:
                shown = ", ".join(active[:5]) + (", ..." if len(active) > 5 else "")
                raise Conflict(
                    f"user {name!r} has {len(active)} active job(s) ({shown}): kill them first, or delete "
                    "with force (--force) to kill them",
                    code=ErrorCode.USER_HAS_JOBS,
                )
            row.token_sha256, row.is_admin = _hash(_new_token()), False  # locked out from now on
            s.commit()
        done = UserDeleted(name=name, killed=active, home_path=str(files.home(name)))
        with ThreadPoolExecutor(max_workers=8) as pool:  # their grace periods run together, not in turn
            for job in active:
                pool.submit(self._kill_quietly, jobs, who, job, name)
        for _ in range(_ROUNDS):
            with jobs.ctx.session() as s:
                left = list(s.scalars(self._jobs_of(name)))
            if not left:
                break
            for job in left:
                try:
                    jobs.delete(who, job, user=name)  # kills it first if it is still active
                except (NotFound, Conflict):  # it ended or went meanwhile: the next round sees
                    continue
                done.jobs_removed += 1
        if delete_files and files.remove_home(name):
            done.home = "deleted"
        with jobs.ctx.session() as s:  # their SampleSets: unmounted and removed by their loop
            s.execute(
                update(SampleSetRow)
                .where(SampleSetRow.owner == name)
                .values(deleting=True, message="deleting: its owner was deleted")
            )
            gone = s.scalar(select(UserRow).where(UserRow.name == name))
            if gone is not None:
                s.delete(gone)
                s.commit()
        return done

    @staticmethod
    def _kill_quietly(jobs: JobService, who: Identity, job: str, user: str) -> None:
        with contextlib.suppress(NotFound, Conflict):  # it ended or went meanwhile
            jobs.kill(who, job, user=user)

    @staticmethod
    def _jobs_of(user: str) -> Select[str]:
        return select(JobRow.name).where(JobRow.user == user).order_by(JobRow.id)
