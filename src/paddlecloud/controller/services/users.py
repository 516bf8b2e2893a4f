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

Deleting a user spans the jobs and the files too: ``controller.platform.user_deletion`` (above the services)
does it, with :meth:`UserDirectory.lock_out` first and :meth:`UserDirectory.forget` last. Who is
asking, and whether they are an admin: ``controller.model.identity``.
"""

from __future__ import annotations

import hashlib
import secrets
import threading

from sqlalchemy import Select, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, NotFound, Unauthorized
from paddlecloud.api.models import TokenView, UserCreate, UserList, UserView
from paddlecloud.controller.model.config import ComputeLimits
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.core.clock import Clock
from paddlecloud.core.phases import TERMINAL_PHASES
from paddlecloud.store.tables import JobRow, RegistryLoginRow, SampleSetRow, UserRow

__all__ = ["UserDirectory"]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> str:
    return "pc_" + secrets.token_urlsafe(32)


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

    def lock_out(self, session: Session, who: Identity, name: str, *, force: bool) -> list[str]:
        """The first step of deleting ``name`` (``controller.platform.user_deletion``): refused for a
        non-admin, for ``who`` themselves, and while ``name`` has active jobs unless ``force``
        (``user_has_jobs``, naming them); then ``name``'s token is replaced by one nobody sees and
        its admin status goes, committed. Returns the active jobs (to be killed)."""
        require_admin(who, "deleting users")
        if name == who.name:
            raise _own_account("delete")
        with self._admin_lock:
            row = self._locked_user(session, who, name)
            active = list(session.scalars(_jobs_of(name).where(JobRow.phase.not_in(TERMINAL_PHASES))))
            if active and not force:
                shown = ", ".join(active[:5]) + (", ..." if len(active) > 5 else "")
                raise Conflict(
                    f"user {name!r} has {len(active)} active job(s) ({shown}): kill them first, or delete "
                    "with force (--force) to kill them",
                    code=ErrorCode.USER_HAS_JOBS,
                )
            row.token_sha256, row.is_admin = _hash(_new_token()), False  # locked out from now on
            session.commit()
        return active

    @staticmethod
    def jobs_of(session: Session, name: str) -> list[str]:
        """The names of ``name``'s jobs, oldest first."""
        return list(session.scalars(_jobs_of(name)))

    @staticmethod
    def forget(session: Session, name: str) -> None:
        """The last step of deleting ``name``: their SampleSets marked deleting (their loop unmounts
        and removes them), their registry logins and their row removed (the name is free again)."""
        session.execute(
            update(SampleSetRow)
            .where(SampleSetRow.owner == name)
            .values(deleting=True, message="deleting: its owner was deleted")
        )
        session.execute(delete(RegistryLoginRow).where(RegistryLoginRow.user == name))
        gone = session.scalar(select(UserRow).where(UserRow.name == name))
        if gone is not None:
            session.delete(gone)
        session.commit()


def _jobs_of(user: str) -> Select[str]:
    return select(JobRow.name).where(JobRow.user == user).order_by(JobRow.id)
