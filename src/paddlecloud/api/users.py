"""Wire models of user administration (``/api/v1/users/{name}``): admin status and deletion.

:class:`AdminUpdate` is the body of ``PUT /users/{name}/admin``; :class:`UserDeleted` answers
``DELETE /users/{name}`` (what happened to the user's jobs and PFS home). The other user models
(``UserView``, ``UserCreate``, ``TokenView``) are in ``api.models``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AdminUpdate", "UserDeleted"]


class AdminUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    admin: bool = Field(description="true: grant admin; false: revoke it")


class UserDeleted(BaseModel):
    name: str
    #: the user's jobs that were still active and were killed (``force``)
    killed: list[str] = Field(default_factory=list)
    #: how many of the user's job records (with their logs, tasks and packages) were removed
    jobs_removed: int = 0
    #: the user's PFS home: ``kept`` (admins can still read it) or ``deleted``
    home: Literal["kept", "deleted"] = "kept"
    home_path: str = ""
