"""What a worker's command line and environment may hold, checked when a job is submitted.

A worker is started with ``execve``: its command (the job's ``entry``) and its environment (the
platform's variables, the job's ``env``) must hold no NUL byte (C strings end at one; Python refuses
them with "embedded null byte") and must fit the kernel's limits: each string at most
``MAX_ARG_STRLEN`` (128 KiB) and all of them together at most ``ARG_MAX`` (typically 2 MiB, a quarter
of the stack limit), or ``execve`` fails with ``E2BIG`` ("Argument list too long"). The platform's
own limits are far below the kernel's, so what was accepted at submit can always be started:

    env      at most MAX_ENV_ENTRIES (256) variables, MAX_ENV_BYTES (64 KiB) in all, counted as the
             kernel does (``KEY=VALUE`` and its terminating NUL, UTF-8)
    entry    at most MAX_ENTRY_CHARS (4,096) characters (≤ 16 KiB in UTF-8), no NUL

``env_problem`` and ``text_problem`` return one line saying what to change, or None.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "MAX_ENTRY_CHARS",
    "MAX_ENV_BYTES",
    "MAX_ENV_ENTRIES",
    "env_bytes",
    "env_problem",
    "text_problem",
]

#: the most variables a job's ``env`` may set
MAX_ENV_ENTRIES = 256
#: the most bytes a job's ``env`` may hold, ``KEY=VALUE\0`` per variable (the kernel's own limit on
#: one string is 128 KiB and on the whole environment with the arguments 2 MiB)
MAX_ENV_BYTES = 64 * 1024
#: the longest ``entry`` (characters)
MAX_ENTRY_CHARS = 4096


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be part of a command line, an environment or a path, or None."""
    if "\x00" in text:
        return "contains a NUL byte (\\x00), which no command line, environment or path can hold; remove it"
    return None


def env_bytes(env: Mapping[str, str]) -> int:
    """The bytes ``env`` takes in a process's environment: ``KEY=VALUE`` and a NUL per variable."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def env_problem(env: Mapping[str, str]) -> str | None:
    """Why a job's ``env`` could not be given to a worker, or None."""
    if len(env) > MAX_ENV_ENTRIES:
        return (
            f"{len(env)} variables, at most {MAX_ENV_ENTRIES} are allowed; put bulk settings in a file of "
            "the package (or in PFS) and pass its path instead"
        )
    for key, value in env.items():
        problem = text_problem(value)
        if problem:
            return f"{key}: {problem}"
    size = env_bytes(env)
    if size > MAX_ENV_BYTES:
        return (
            f"{size} bytes of variables, at most {MAX_ENV_BYTES} ({MAX_ENV_BYTES // 1024} KiB) are allowed; "
            "put large values in a file of the package (or in PFS) and pass its path instead"
        )
    return None
