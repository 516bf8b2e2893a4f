"""What every test must leave as it found it: the test process's signal dispositions.

A signal set to ``SIG_IGN`` stays ignored across ``exec``: a test that calls code meant to run as its
own process (the Slurm node side ignores SIGTERM while it waits for its worker) in the pytest
process would make every process the session starts after it ignore SIGTERM too, so that a later
test's ``terminate()`` no longer stops its server (seen: the multi-host bed's HTTP server outlived
its SIGTERM in the full lane, never alone). Each test's dispositions are put back after it, and one
that left a signal ignored fails, naming it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

_WATCHED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _signals_as_found() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in _WATCHED}
    yield
    ignored = []
    for sig, handler in before.items():
        now = signal.getsignal(sig)
        if now is not handler:
            if now is signal.SIG_IGN:
                ignored.append(signal.Signals(sig).name)
            signal.signal(sig, handler)
    assert not ignored, f"the test left {', '.join(ignored)} ignored: every process started after it is too"
