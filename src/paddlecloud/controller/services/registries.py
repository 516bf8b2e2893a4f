"""A user's container-registry logins: ``paddlecloud image login / logout / logins``.

    PUT    /registries/{registry}/login ──login(who, registry, RegistryLogin)──▶ sealed, stored
    DELETE /registries/{registry}/login ──logout(who, registry)──▶ removed (not there: not found)
    GET    /registries                  ──logins(who)──▶ registry, username, when; never a password

Each user reaches only their own logins; a job pulls with its owner's (``model.registry_logins``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import select

from paddlecloud.api.errors import ErrorCode, InvalidInput, NotFound
from paddlecloud.api.images import MAX_REGISTRY_CHARS, RegistryLogin, RegistryLoginList, RegistryLoginView
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.identity import Identity
from paddlecloud.controller.model.registry_logins import SecretBox, login_row
from paddlecloud.store.tables import RegistryLoginRow

__all__ = ["RegistryLogins"]

_REGISTRY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?")


def _registry(text: str) -> str:
    if len(text) > MAX_REGISTRY_CHARS or not _REGISTRY.fullmatch(text):
        raise InvalidInput(
            f"registry {text[:80]!r}: a host name or address with an optional :PORT (as in the image's "
            "reference, 127.0.0.1:5000/train:1 -> 127.0.0.1:5000)",
            field="registry",
        )
    return text


class RegistryLogins:
    def __init__(self, ctx: Context, box: SecretBox) -> None:
        self.ctx = ctx
        self.box = box

    def login(self, who: Identity, registry: str, login: RegistryLogin) -> None:
        registry = _registry(registry)
        sealed = self.box.seal(login.password.get_secret_value())
        with self.ctx.session() as s:
            row = login_row(s, who.name, registry)
            if row is None:
                row = RegistryLoginRow(user=who.name, registry_name=registry)
                s.add(row)
            row.username, row.secret, row.created_at = login.username, sealed, self.ctx.clock.now()
            s.commit()

    def logout(self, who: Identity, registry: str) -> None:
        with self.ctx.session() as s:
            row = login_row(s, who.name, _registry(registry))
            if row is None:
                raise NotFound(f"you have no login for {registry}", code=ErrorCode.REGISTRY_LOGIN_NOT_FOUND)
            s.delete(row)
            s.commit()

    def logins(self, who: Identity) -> RegistryLoginList:
        mine = select(RegistryLoginRow).where(RegistryLoginRow.user == who.name)
        with self.ctx.session() as s:
            rows = s.scalars(mine.order_by(RegistryLoginRow.registry_name)).all()
            return RegistryLoginList(logins=[_view(r) for r in rows])


def _view(row: RegistryLoginRow) -> RegistryLoginView:
    when = datetime.fromtimestamp(row.created_at, tz=UTC)
    return RegistryLoginView(registry=row.registry_name, username=row.username, created_at=when)
