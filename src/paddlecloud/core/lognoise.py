"""Which lines of a job's log are the frameworks' own chatter, so that a person sees their program.

    worker log lines ──▶ LogFilter.feed(line) ──▶ lines to show now   (+ ``hidden``: how many not)
                         LogFilter.flush()    ──▶ what a worker's unfinished block held

``paddlecloud submit --wait`` follows a job's logs through this filter (``--verbose`` shows every
line); ``paddlecloud logs`` never filters, and the log files keep everything. Lines may carry the
``[worker] `` prefix of a multi-worker log; each worker is judged on its own.

What is hidden (each rule matches framework internals, never a program's own words):

- one-line chatter: glog ``I``/``W`` lines (PaddlePaddle's C++ core, torch's ``[W1125 ...]``),
  PaddlePaddle's Python ``[    INFO] file.py:N -`` log lines and the fleet parameter-server prints
  (``fl-ps >``, ``is_heter_ps_mode?``, ``communicator config:``, ...), torchrun's
  ``OMP_NUM_THREADS`` banner and its ``INFO:``/``WARNING:torch.distributed`` lines, and Python
  warnings raised inside installed packages (``.../site-packages/...py:N: XWarning:``, with the
  source line printed under it);
- a blank line right after a hidden line;
- PaddlePaddle's "``Termination signal``" report of a SIGTERM (a C++ traceback block): the platform
  stopping the worker (pservers after the trainers succeeded, a kill, a preemption, a shrink), not
  a failure. The block is held until its ``SignalInfo`` line says SIGTERM; any other signal, any
  other error, or a line that does not belong to such a block, and every line held is shown.

Errors, tracebacks, ``E``/``F`` glog lines and warnings from the program's own files are always
shown. Pure: no I/O, no clock; the same lines give the same answer.
"""

from __future__ import annotations

import re

__all__ = ["LogFilter", "is_noise"]

_NOISE = re.compile(
    "|".join(
        (
            r"\[?[IW]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? +[^\]\s]+:\d+\]",  # glog I/W (Paddle, torch)
            r"\[[IW] [^\]\s]+:\d+\]",  # older torch c10: [W socket.cpp:663]
            r"\[\d{4}-\d\d-\d\d [\d:,]+\] \[ *(?:INFO|DEBUG)\] \S+\.py:\d+ - ",  # Paddle's Python logger
            r"fl-ps > ",
            r"(?:valid_optimizer_list|meta_optimizer|graph_optimizer)= ",
            r"is_heter_ps_mode",
            r"idx, name, ctx: ",
            r" (?:table_id|program_id|is_tensor_table|is_datanorm_table): ",
            r"adam_d2sum: ",
            r"remote_optimize_vars: ",
            r"paddle\.static\.default_startup_program: ",
            r"communicator config: \{",
            r"create c2c connection done$",
            r"entering self\._init_all_params\(\)$",
            r"save inference model scope idx: ",
            r"Gloo init with HTTP: ",
            r"(?:INFO|WARNING):torch\.distributed\.",
            r"\*{20,}$",  # torchrun's banner around the OMP_NUM_THREADS notice
            r"Setting OMP_NUM_THREADS environment variable for each process",
            r"\S*/site-packages/\S+\.py:\d+: \w*Warning: ",  # a warning raised inside a library
        )
    )
)
_LIBRARY_WARNING = re.compile(r"\S*/site-packages/\S+\.py:\d+: \w*Warning: ")
#: ``[trainer-0] `` of a multi-worker log (worker names are DNS labels)
_PREFIX = re.compile(r"\[([a-z][a-z0-9-]{0,62})\] ")

# PaddlePaddle's report of a fatal signal:
#   --------------------------------------
#   C++ Traceback (most recent call last):
#   --------------------------------------
#   0   paddle::distributed::FleetWrapper::RunServer(...)      (or: No stack trace in paddle, ...)
#   ----------------------
#   Error Message Summary:
#   ----------------------
#   FatalError: `Termination signal` is detected by the operating system.
#     [TimeInfo: *** Aborted at ... ***]
#     [SignalInfo: *** SIGTERM (@0x...) received by PID 6 (TID ...) from PID 0 ***]
_BLOCK_START = re.compile(r"-{20,}$")
_BLOCK_LINE = re.compile(
    r"-{20,}$|C\+\+ Traceback \(most recent call last\):$|\d+ +\S|No stack trace in paddle|"
    r"Error Message Summary:$|FatalError: `Termination signal` is detected|  \[TimeInfo: |$"
)
_SIGTERM = re.compile(r"  \[SignalInfo: \*\*\* SIGTERM ")


def is_noise(text: str) -> bool:
    """Whether one line (without its ``[worker] `` prefix and newline) is framework chatter."""
    return _NOISE.match(text) is not None


class LogFilter:
    """Feed a log line by line; shows what a person wants to see and counts what it hides."""

    def __init__(self) -> None:
        self.hidden = 0
        self._held: dict[str, list[str]] = {}  # worker -> lines of a block not decided yet
        self._after_noise: dict[str, str] = {}  # worker -> "noise" / "warning" after a hidden line

    def feed(self, line: str) -> list[str]:
        """The lines to show now (``line`` as given, possibly after held ones), maybe none."""
        m = _PREFIX.match(line)
        worker, text = (m.group(1), line[m.end() :]) if m else ("", line)
        text = text.rstrip("\r\n")
        held = self._held.get(worker)
        if held is not None:
            if _SIGTERM.match(text):
                self.hidden += len(held) + 1
                del self._held[worker]
                self._after_noise[worker] = "noise"
                return []
            if _BLOCK_LINE.match(text):
                held.append(line)
                return []
            shown = self._release(worker)
            return shown + self.feed(line)
        if _BLOCK_START.match(text):
            self._held[worker] = [line]
            return []
        after = self._after_noise.pop(worker, "")
        continuation = (after and not text.strip()) or (after == "warning" and text[:1].isspace())
        if continuation or is_noise(text):
            self.hidden += 1
            self._after_noise[worker] = "warning" if _LIBRARY_WARNING.match(text) else "noise"
            return []
        return [line]

    def flush(self) -> list[str]:
        """Every line still held (the log ended inside a block): shown, since it was not a stop."""
        out: list[str] = []
        for worker in list(self._held):
            out += self._release(worker)
        return out

    def _release(self, worker: str) -> list[str]:
        return self._held.pop(worker, [])
