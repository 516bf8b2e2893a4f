"""The validation context of specs read back rather than submitted.

A job's spec is validated when it is submitted, with every limit of the day. The same models parse
it again when it is read back: from the database (the controller) and from a server's answer (the
SDK). Read back with ``context=STORED``, the submit-time limits (sizes, resource bounds, NUL bytes)
are not applied again, so a job accepted by an earlier, laxer version stays readable; a job that
cannot run is then failed alone by the controller, never made unreadable.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

__all__ = ["STORED", "is_stored"]

#: pass as ``context=`` to ``model_validate`` / ``model_validate_json`` for a spec read back
STORED: dict[str, Any] = {"stored": True}


def is_stored(info: ValidationInfo) -> bool:
    """Whether a validator runs on a spec read back (skip the submit-time limits)."""
    return bool(isinstance(info.context, dict) and info.context.get("stored"))
