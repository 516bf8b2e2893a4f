"""Names: job names are DNS-1123 labels (they become pod and service names on Kubernetes)."""

from __future__ import annotations

import re

__all__ = ["NAME_MAX", "check_dns1123_label", "check_env_name"]

NAME_MAX = 63
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_dns1123_label(name: str) -> str:
    """Return ``name`` or raise ``ValueError`` naming the broken rule."""
    if not name:
        raise ValueError("must not be empty")
    if len(name) > NAME_MAX:
        raise ValueError(f"must be at most {NAME_MAX} characters (DNS-1123 label), got {len(name)}")
    if not _LABEL.fullmatch(name):
        raise ValueError(
            "must be a DNS-1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return name


def check_env_name(name: str) -> str:
    """Environment variable names: a letter or ``_`` then letters, digits, ``_``."""
    if not _ENV.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid environment variable name")
    return name
