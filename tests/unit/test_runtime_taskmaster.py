"""paddlecloud.runtime.tasks(): the standard-library client against a real HTTP server (uvicorn in a
thread, manual server clock): iteration and acknowledgement, failures, renewal, lost leases, retries
while the server is down, byte-range line reading; and a real job whose trainers lease over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from task_helpers import Bench, HttpServer, free_port

from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import TERMINAL_PHASES
from paddlecloud.runtime import LeaseLost, Task, TaskMaster, TaskMasterError, tasks
from paddlecloud.runtime import contract as c

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


@pytest.fixture
def server(bench: Bench) -> Iterator[HttpServer]:
    srv = HttpServer(bench.platform).start()
    yield srv
    srv.stop()


def master(bench: Bench, server: HttpServer, job: str, worker: str = "trainer-0", **kw: object) -> TaskMaster:
    env = {c.API: server.url, c.JOB_TOKEN: bench.job_token("alice", job), c.JOB_NAME: job, c.WORKER: worker}
    return TaskMaster(environ=env, **kw)  # type: ignore[arg-type]


def test_the_loop_acknowledges_every_task_once_per_pass(bench: Bench, server: HttpServer) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "loop", {"items": ["a", "b", "c"], "num_passes": 2})
    seen = [(t.pass_no, t.path) for t in tasks(master(bench, server, "loop"))]
    assert seen == [(p, x) for p in range(2) for x in "abc"]
    status = alice.tasks.status("loop")
    assert [(t.state, t.done_passes, t.holder) for t in status.items] == [("done", 2, "trainer-0#0")] * 3
    assert status.summary.finished


def test_an_exception_in_the_body_reports_the_task_failed(bench: Bench, server: HttpServer) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "boom", {"items": ["a", "b"]})
    m = master(bench, server, "boom")
    with pytest.raises(ValueError, match="bad record"):
        for _task in tasks(m):
            raise ValueError("bad record")
    first = alice.tasks.status("boom").items[0]
    assert (first.state, first.failures) == ("todo", 1)
    assert "left the task loop" in first.error
    with m.lease() as task:  # type: ignore[union-attr]
        assert task.index == 0
    assert task.state == "done"
    with pytest.raises(KeyError), m.lease() as task:  # type: ignore[union-attr]
        raise KeyError("x")
    assert task.state == "failed"
    assert "KeyError" in alice.tasks.status("boom").items[1].error


def test_a_held_task_is_renewed_in_the_background(bench: Bench, server: HttpServer) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "slow", {"items": ["a"], "lease_timeout": 1})
    m = master(bench, server, "slow")
    task = m.lease()
    assert task is not None
    expiries = set()
    for _ in range(3):  # 1.2 s: the renewer runs every 1/3 s and moves the expiry with the clock
        bench.clock.advance(0.4)
        time.sleep(0.4)
        expiries.add(alice.tasks.status("slow").items[0].expires_at)
    assert len(expiries) == 3
    assert task.done() is True


def test_a_lost_lease_is_reported_not_acknowledged(bench: Bench, server: HttpServer) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "lost", {"items": ["a"], "lease_timeout": 5})
    slow = master(bench, server, "lost", auto_renew=False)
    task = slow.lease()
    assert task is not None
    bench.clock.advance(6)  # expired; another trainer takes it over
    other = master(bench, server, "lost", worker="trainer-1").lease()
    assert other is not None and other.index == task.index
    assert task.done() is False and task.state == "lost"
    with pytest.raises(LeaseLost):
        slow._call("POST", f"/{task.index}/renew", {"lease": task.lease})
    assert other.done() is True


def test_requests_are_retried_while_the_server_is_down(bench: Bench) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "later", {"items": ["a"]})
    port = free_port()
    env = {
        c.API: f"http://127.0.0.1:{port}",
        c.JOB_TOKEN: bench.job_token("alice", "later"),
        c.JOB_NAME: "later",
    }
    holder: list[HttpServer] = []
    starter = threading.Timer(1.0, lambda: holder.append(HttpServer(bench.platform, port).start()))
    starter.start()
    try:
        task = TaskMaster(environ=env, retry_for=15).lease()
        assert task is not None and task.path == "a"
        assert task.done()
    finally:
        starter.join()
        for srv in holder:
            srv.stop()
    with pytest.raises(TaskMasterError, match="cannot reach"):
        TaskMaster(environ=env, retry_for=0.3).status()


def test_outside_a_job_with_tasks_it_says_what_is_missing() -> None:
    with pytest.raises(TaskMasterError, match="PADDLECLOUD_API"):
        TaskMaster(environ={})


def test_byte_ranges_yield_every_line_exactly_once(tmp_path: Path) -> None:
    lines = [f"line {i} {'x' * (i % 7)}\n".encode() for i in range(50)]
    data = b"".join(lines)
    (tmp_path / "f.txt").write_bytes(data)
    for chunk in (1, 5, 9, 16, 64, len(data)):
        got: list[bytes] = []
        for off in range(0, len(data), chunk):
            n = min(chunk, len(data) - off)
            t = Task(index=0, kind="range", path="f.txt", offset=off, length=n, pass_no=0, num_passes=1,
                     lease="x", lease_seconds=1, input_dir=str(tmp_path))  # fmt: skip
            got.extend(t.lines())
        assert got == lines, chunk
    whole = Task(index=0, kind="file", path="f.txt", offset=0, length=len(data), pass_no=0, num_passes=1,
                 lease="x", lease_seconds=1, input_dir=str(tmp_path))  # fmt: skip
    assert whole.read() == data and list(whole.lines()) == lines


# -- a real job -----------------------------------------------------------------------------------

TRAIN = """
import time
from paddlecloud.runtime import env, tasks
me = env().worker
for task in tasks():
    time.sleep(0.15)
    if task.done():
        print("acked", task.pass_no, task.path, flush=True)
"""


def test_a_jobs_trainers_lease_over_http_with_the_job_token(
    platform_factory: Callable[..., Platform], asgi: Callable[[Platform], httpx.Client], tmp_path: Path
) -> None:
    port = free_port()
    platform = platform_factory(api_url=f"http://127.0.0.1:{port}")
    srv = HttpServer(platform, port).start()
    try:
        alice = Client("http://testserver", platform.ensure_user("alice"), http=asgi(platform))
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        (pkg / "train.py").write_text(TRAIN)
        items = [f"shard-{i}" for i in range(8)]
        spec = {"name": "leasing", "entry": "python train.py", "trainers": {"count": 2},
                "tasks": {"items": items, "num_passes": 2}}  # fmt: skip
        alice.submit(spec, package_dir=pkg)
        deadline = time.monotonic() + 40
        while (job := alice.job("leasing")).phase not in TERMINAL_PHASES and time.monotonic() < deadline:
            platform.reconciler.tick()
            time.sleep(0.1)
        assert job.phase == "Succeeded", job.message
        acks = [line.split()[-3:] for line in alice.logs("leasing") if " acked " in line]
        assert sorted((int(p), x) for _, p, x in acks) == sorted((p, x) for p in range(2) for x in items)
        assert {line.split()[0] for line in alice.logs("leasing") if " acked " in line} == {
            "[trainer-0]",
            "[trainer-1]",
        }
        status = alice.tasks.status("leasing")
        assert [(t.state, t.done_passes) for t in status.items] == [("done", 2)] * 8
    finally:
        srv.stop()
