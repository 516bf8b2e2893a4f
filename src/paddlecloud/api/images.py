"""Wire models of a user's container-registry logins (``/api/v1/registries/{registry}/login``).

:class:`RegistryLogin` is the body of ``PUT`` (the password is write-only: no answer, listing or log
holds it again); :class:`RegistryLoginView` one entry of ``GET /api/v1/registries``.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["MAX_REGISTRY_CHARS", "RegistryLogin", "RegistryLoginList", "RegistryLoginView"]

#: the longest registry name (host[:port]) accepted
MAX_REGISTRY_CHARS = 255


class RegistryLogin(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    username: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")
    password: SecretStr = Field(min_length=1, max_length=4096, description="write-only; never shown again")


class RegistryLoginView(BaseModel):
    registry: str
    username: str
    created_at: datetime


class RegistryLoginList(BaseModel):
    logins: list[RegistryLoginView] = Field(default_factory=list)
