"""Elastic PyTorch through the whole platform: the scheduler grows a running torch job 2 -> 4 and
shrinks it 4 -> 1; the job finishes with the target accuracy and loses no epoch beyond the one in
progress at each membership change (it resumes from its checkpoint).

A server of its own with one 4-CPU virtual node and the default (elastic) policy. The blockers are
framework-none jobs that hold CPUs for a while.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Server, write_package

pytestmark = pytest.mark.timeout(600)

EPOCHS = 150


def _trainers(srv: Server, name: str) -> int:
    return int(srv.job(name)["trainers"]["desired"])


def _until_trainers(srv: Server, name: str, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _trainers(srv, name) != n:
        assert time.monotonic() < deadline, f"{name} never reached {n} trainers: {srv.job(name)['events']}"
        time.sleep(0.5)


def _until_log(srv: Server, name: str, text: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in srv.cli("logs", name).stdout:
        assert time.monotonic() < deadline, f"{name} never logged {text!r}"
        time.sleep(1)


def test_torch_job_grows_and_shrinks_and_resumes_from_checkpoints(small: Server, tmp_path: Path) -> None:
    blocker = write_package(
        tmp_path / "blocker", {"main.py": "import time, sys\ntime.sleep(float(sys.argv[1]))\n"}
    )
    small.cli("submit", str(blocker), "--name", "hold2", "--entry", "python main.py 300", "--trainers", "2",
              "--cpu", "1")  # fmt: skip
    small.wait_phase("hold2", {"Running"})
    small.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "elastic", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "2", "--min-instance", "1", "--max-instance", "4",
        "--cpu", "1", "--env", f"EPOCHS={EPOCHS}",
    )  # fmt: skip
    small.wait_phase("elastic", {"Running"}, timeout=300)
    assert _trainers(small, "elastic") == 2  # only 2 of the 4 CPUs are free
    small.cli("kill", "hold2", "--grace", "1")
    _until_trainers(small, "elastic", 4)  # hold2 is gone: the job grows into the free CPUs
    _until_log(small, "elastic", "world 4")  # training goes on with 4 ranks
    small.cli("submit", str(blocker), "--name", "hold3", "--entry", "python main.py 20", "--trainers", "3",
              "--cpu", "1")  # fmt: skip
    _until_trainers(small, "elastic", 1)  # shrunk (not preempted) to make room for hold3
    job = small.wait_phase("elastic", {"Succeeded", "Failed"}, timeout=400)
    assert job["phase"] == "Succeeded", job["message"]
    messages = [e["message"] for e in job["events"] if e["reason"] == "Resized"]
    assert any(m.startswith("trainers 2 -> 4") for m in messages), messages
    assert any(m.startswith("trainers 4 -> 1") for m in messages), messages
    assert "Preempted" not in {e["reason"] for e in job["events"]}

    # every run of every trainer (an agent restarted by its OnFailure policy has several logs)
    run_logs = sorted(
        (small.data_dir / "cluster" / "jobs" / "default" / "elastic" / "logs").glob("trainer-*.log")
    )
    logs = "".join(f"[{p.stem}] " + line + "\n" for p in run_logs for line in p.read_text().splitlines())
    acc = re.findall(r"final accuracy ([0-9.]+)$", logs, re.M)
    assert acc and float(acc[-1]) >= 0.97, logs[-3000:]
    assert re.search(r"resumed from checkpoint after epoch \d+", logs), logs[-3000:]
    # every epoch trained; an epoch repeats only when a membership change interrupted it
    epochs = Counter(int(e) for e in re.findall(r"\] epoch (\d+) loss", logs))
    assert set(epochs) == set(range(EPOCHS)), sorted(set(range(EPOCHS)) - set(epochs))
    group_starts = len(re.findall(r"rank 0/\d+ started", logs))
    assert group_starts >= 2  # 4 ranks, then fewer (the group restarts on every membership change)
    assert sum(epochs.values()) - EPOCHS <= group_starts - 1, (epochs.most_common(5), group_starts)
    assert (Path(job["output_dir"]) / "model.pt").is_file()
