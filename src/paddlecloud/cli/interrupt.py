"""Ctrl-C in the ``paddlecloud`` program: the same exit status whenever it comes.

A command spends its start-up importing its modules and parsing its options (~0.3 s here, seconds on
a loaded machine) before its own code runs. Python raises KeyboardInterrupt wherever the program is,
so a Ctrl-C in that start-up ended even ``get jobs --watch``, whose Ctrl-C is its normal end (exit
0), as an interrupted command (exit 130): the status depended on when the key was pressed, and a
script stopping a watch with SIGINT got one or the other. So the program holds a Ctrl-C that comes
while it starts and lets it go once the command's own code begins, when its options say how it ends::

    main() ──hold()──▶ imports; options parsed (--watch: ends_cleanly()) ──▶ the command's code begins:
        release() ──a held Ctrl-C raised there──▶ main() exits with exit_code(): 0 a watch, else 130

A second Ctrl-C while one is held is raised at once (a start-up that hangs can still be interrupted).
Only where SIGINT raises KeyboardInterrupt: a program started with it ignored (a shell's background
job) keeps ignoring it. Before ``main()`` runs (the interpreter's start and the entry point's imports,
~50 ms here) Python's own handler applies.
"""

from __future__ import annotations

import signal
from types import FrameType

__all__ = ["drop", "ends_cleanly", "exit_code", "hold", "release", "reset"]


class _State:
    held = False  # a Ctrl-C is being held: the handler is ours
    pending = False  # one came while held
    exit = 130  # the command's exit status after a Ctrl-C


_STATE = _State()


def reset() -> None:
    """A new command (``main()`` in a process that ran one before): its Ctrl-C exits 130 again."""
    _STATE.exit = 130


def ends_cleanly() -> None:
    """This command's normal end is Ctrl-C (``--watch``): it exits 0, whenever the Ctrl-C comes."""
    _STATE.exit = 0


def exit_code() -> int:
    """The exit status of this command after a Ctrl-C."""
    return _STATE.exit


def hold() -> None:
    """From now until :func:`release`: a Ctrl-C is held, not raised."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # ignored (or handled by an embedding program): left as it is
    _STATE.held, _STATE.pending = True, False
    signal.signal(signal.SIGINT, _keep)


def release() -> None:
    """Ctrl-C raises KeyboardInterrupt again, and one held since :func:`hold` is raised now."""
    if not _STATE.held:
        return
    drop()
    if _STATE.pending:
        _STATE.pending = False
        raise KeyboardInterrupt


def drop() -> None:
    """Python's handler again, a held Ctrl-C forgotten (the command ended before its code began:
    help, a usage error)."""
    if _STATE.held:
        _STATE.held = False
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _keep(signum: int, frame: FrameType | None) -> None:
    if _STATE.pending:  # pressed again: now
        drop()
        raise KeyboardInterrupt
    _STATE.pending = True
