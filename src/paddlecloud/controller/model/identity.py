"""Who is asking: the caller's :class:`Identity` (from its API token, ``UserDirectory.authenticate``)
and :func:`require_admin`, the one place that decides whether an admin-only operation may go on.

Every service takes an ``Identity``; this module imports nothing of theirs, so each of them (and the
use cases above them, ``controller.platform.user_deletion``) can import it without a circle.
"""

from __future__ import annotations

from paddlecloud.api.errors import ErrorCode, Forbidden

__all__ = ["Identity", "require_admin"]


class Identity:
    __slots__ = ("is_admin", "name")

    def __init__(self, name: str, is_admin: bool) -> None:
        self.name = name
        self.is_admin = is_admin


def require_admin(who: Identity, what: str) -> None:
    """Raise ``Forbidden`` (code ``forbidden``) unless ``who`` is an admin; ``what`` names the action.
    A non-admin learns nothing (not even whether a user exists) from an admin endpoint."""
    if not who.is_admin:
        raise Forbidden(f"{what} is for admins only; user {who.name!r} is not one", code=ErrorCode.FORBIDDEN)
