"""Benchmark: SIGKILL the server during 500 concurrent submits; acknowledged vs found after restart.

The same run as the CI test (``tests/e2e/test_crash_under_load.py``, 200 submits), at a larger size:
two long jobs hold the cluster, ``--submits`` POST /jobs go out from ``--threads`` threads, the server
is SIGKILLed once ``--kill-after`` are acknowledged, then started again on the same data dir.

    .venv/bin/python bench/crash_submits.py [--submits 500] [--kill-after 250] [--threads 32]

Must print ``lost 0``: every acknowledged job is present after the restart.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import Server  # noqa: E402
from tests.e2e.crashload import crash_during_submits  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submits", type=int, default=500)
    ap.add_argument("--kill-after", type=int, default=250)
    ap.add_argument("--threads", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        srv.start()
        try:
            r = crash_during_submits(srv, base, submits=args.submits, kill_after=args.kill_after,
                                     threads=args.threads)  # fmt: skip
        finally:
            srv.stop()
    lost = r.acknowledged - r.found
    print(f"submits sent {r.sent}, server SIGKILLed {r.kill_at_s:.1f} s after the first")
    kept, extra = len(r.found & r.acknowledged), len(r.found - r.acknowledged)
    print(f"  acknowledged {len(r.acknowledged)}, found after restart {kept} "
          f"(+{extra} in flight at the kill, committed), lost {len(lost)}")  # fmt: skip
    print(f"  without their Submitted event {len(r.missing_events)}, "
          f"never sent but present {len(r.unexpected)}")  # fmt: skip
    print(f"  SQLite integrity_check: {r.integrity}; running jobs re-adopted: {r.readopted}")
    sys.exit(1 if lost or r.unexpected or r.missing_events or r.integrity != "ok" or not r.readopted else 0)


if __name__ == "__main__":
    main()
