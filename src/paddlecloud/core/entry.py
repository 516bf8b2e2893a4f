"""Check that a job's entry command names a file that its package has.

``python -u train.py`` → ``train.py``; ``bash run.sh`` → ``run.sh``; ``./bin/start`` → ``bin/start``.
Commands found on ``PATH`` (``sleep 30``), modules (``python -m pkg``) and absolute paths are not
checked: they are resolved in the worker.
"""

from __future__ import annotations

import os
import shlex

__all__ = ["entry_problem"]

_INTERPRETERS = {"python", "python3", "bash", "sh"}
#: Interpreter options followed by a separate value (``python -W ignore x.py``, ``bash -o pipefail x.sh``).
_TAKES_VALUE = {"-W", "-X", "-Q", "-o", "-O", "--rcfile", "--init-file"}


def _script_of(argv: list[str]) -> str | None:
    prog = argv[0]
    base = os.path.basename(prog)
    if base in _INTERPRETERS or base.startswith("python3."):
        args = iter(argv[1:])
        for arg in args:
            if arg in ("-m", "-c"):
                return None
            if arg in _TAKES_VALUE:
                next(args, None)
            elif not arg.startswith("-"):
                return arg
        return None
    if "/" in prog and not prog.startswith("/"):
        return prog
    return None


def entry_problem(entry: str, files: list[str]) -> str | None:
    """A one-line description of what is wrong with ``entry`` for a package of ``files``, or None."""
    try:
        argv = shlex.split(entry)
    except ValueError as exc:
        return f"entry {entry!r} is not a valid command line: {exc}"
    if not argv:
        return "entry is empty"
    script = _script_of(argv)
    if script is None or script.startswith("/") or "$" in script:
        return None
    if os.path.normpath(script) in files:
        return None
    sample = ", ".join(sorted(files)[:8]) + (", ..." if len(files) > 8 else "")
    return f"entry {entry!r} runs {script}, which is not in the package (it has: {sample or 'no files'})"
