"""The base of every request body the server reads (a job spec, a PFS mkdir, a task lease, ...).

    client JSON ──▶ FastAPI: TypeAdapter(Annotated[Model, Field(alias=<parameter>)]) ──▶ Model

Bodies refuse unknown fields and are built when their module is imported, never deferred (the
views are: the CLI starts faster without building schemas it may not use). FastAPI validates a body
through the adapter above and silences Pydantic's ``UnsupportedFieldAttributeWarning`` about that
alias only while it creates the adapter; the adapter of a deferred model builds its schema at the
first request instead, outside that, and ``paddlecloud up`` printed the warning to its user.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Body"]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
