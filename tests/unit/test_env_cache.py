"""The environment cache under a size cap: least recently used environments that no job uses are
evicted after a build passes the cap; an environment in use (pinned from a job's prepare to the end
of its processes, across a server restart) never is.

``SizedCache`` replaces only the build step (pip) by writing ``size=N`` bytes, so the tests cover the
cache's own logic fast; the last test runs real jobs on the local backend with real builds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from paddlecloud.backends.local.envs import READY, EnvCache
from paddlecloud.backends.lru_dirs import dir_size
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import JobPhase

pytestmark = pytest.mark.timeout(120)

MB = 2**20


class SizedCache(EnvCache):
    """Builds ``size=N`` requirements into N bytes of data, counting builds."""

    builds: list[str]

    def _build(self, target: Path, requirements: str, log: Path) -> None:
        self.builds = getattr(self, "builds", [])
        self.builds.append(requirements)
        target.mkdir(parents=True)
        size = int(requirements.split("=")[1].split()[0])
        (target / "payload").write_bytes(b"x" * size)
        time.sleep(0.01)  # long enough for threads to overlap


#: environments that are not 1 MiB
SIZES = {"held": 2 * MB, "big": 3 * MB, "m": 3 * MB}


def req(name: str) -> str:
    return f"size={SIZES.get(name, MB)} {name}"


@pytest.fixture
def cache(tmp_path: Path) -> SizedCache:
    return SizedCache(tmp_path / "envs", max_bytes=3 * MB + MB // 2)


def present(cache: EnvCache, *names: str) -> list[str]:
    return [n for n in names if (cache.path_for(req(n)) / READY).exists()]


def use(cache: EnvCache, name: str, log: Path) -> None:
    """A job that prepares with the environment and ends."""
    cache.ensure(req(name), log, holder=f"alice/{name}")
    cache.release(req(name), f"alice/{name}")


def test_the_least_recently_used_environments_go_first(cache: SizedCache, tmp_path: Path) -> None:
    log = tmp_path / "prepare.log"
    for name in ("a", "b", "c"):
        use(cache, name, log)
        time.sleep(0.02)  # distinct last-use times
    use(cache, "a", log)  # a is used again: now b is the least recently used
    assert cache.builds == [req("a"), req("b"), req("c")]  # a was reused, not rebuilt
    time.sleep(0.02)
    use(cache, "d", log)  # 4 MiB > 3.5 MiB: one must go
    assert present(cache, "a", "b", "c", "d") == ["a", "c", "d"]
    assert not cache.path_for(req("b")).exists() and not list(cache.root.glob(".evicted-*"))
    assert sum(size for _, size, _, _ in cache.entries()) <= cache.max_bytes  # type: ignore[operator]
    use(cache, "b", log)  # evicted ones are simply built again
    assert cache.builds[-1] == req("b") and present(cache, "b") == ["b"]


def test_an_environment_in_use_is_never_evicted(cache: SizedCache, tmp_path: Path) -> None:
    log = tmp_path / "prepare.log"
    held = cache.ensure(req("held"), log, holder="alice/long")  # the oldest, but in use
    time.sleep(0.02)
    for name in ("x", "y"):
        use(cache, name, log)
        time.sleep(0.02)
    assert present(cache, "held", "x", "y") == ["held", "y"]  # x went, held stays
    big = cache.ensure(req("big"), log, holder="bob/big")  # both in use: over the cap
    assert (held / READY).exists() and (big / READY).exists()
    assert "more than its cap, all in use" in log.read_text()
    cache.release(req("held"), "alice/long")
    use(cache, "z", log)  # now held may go (it is the least recently used)
    assert not held.exists() and (big / READY).exists()


def test_pins_are_on_disk_so_a_restarted_server_keeps_them(tmp_path: Path) -> None:
    log = tmp_path / "prepare.log"
    first = SizedCache(tmp_path / "envs", max_bytes=MB + MB // 2)
    first.ensure(req("running"), log, holder="alice/job")
    second = SizedCache(tmp_path / "envs", max_bytes=MB + MB // 2)  # a server restart
    second.pin(req("running"), "alice/job")  # adoption pins again: no change
    use(second, "new", log)
    assert present(second, "running", "new") == ["running", "new"]  # over the cap, but in use
    second.release(req("running"), "alice/job")
    time.sleep(0.02)
    use(second, "newer", log)
    assert present(second, "running", "new", "newer") == ["newer"]


def test_concurrent_builds_never_evict_what_another_job_is_using(tmp_path: Path) -> None:
    cache = SizedCache(tmp_path / "envs", max_bytes=2 * MB)
    errors: list[str] = []
    start = threading.Barrier(8)

    def job(i: int) -> None:
        start.wait(timeout=30)
        for round_ in range(5):
            name, holder = f"env{(i + round_) % 6}", f"u/job{i}"
            path = cache.ensure(req(name), tmp_path / f"log{i}", holder=holder)
            time.sleep(0.005)
            if not (path / READY).exists() or (path / "payload").stat().st_size != MB:
                errors.append(f"{holder} lost {name} while using it")
            cache.release(req(name), holder)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert not list(cache.root.glob("*.pins/*"))
    use(cache, "after", tmp_path / "log")  # nothing in use now: the next build brings it under the cap
    assert sum(size for _, size, _, _ in cache.entries()) <= 2 * MB


def test_the_same_environment_is_built_once_for_concurrent_jobs(cache: SizedCache, tmp_path: Path) -> None:
    threads = [
        threading.Thread(target=cache.ensure, args=(req("shared"), tmp_path / "log", f"u/j{i}"))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert cache.builds == [req("shared")]
    assert len(list((cache.root / f"{cache.path_for(req('shared')).name}.pins").iterdir())) == 8


def test_sizes_are_measured_once_and_leftovers_of_an_eviction_are_removed(tmp_path: Path) -> None:
    (tmp_path / "envs" / ".evicted-abc-123" / "bin").mkdir(parents=True)
    cache = SizedCache(tmp_path / "envs", max_bytes=None)
    assert not list(cache.root.glob(".evicted-*"))
    path = cache.ensure(req("m"), tmp_path / "log")
    assert int((cache.root / f"{path.name}.size").read_text()) == dir_size(path) >= 3 * MB


def _job(
    client: Client, make_package: Callable[[dict[str, str]], Path], name: str, reqs: str, run: str
) -> None:
    pkg = make_package({"requirements.txt": reqs + "\n", "main.py": run})
    client.submit({"name": name, "entry": "python main.py", "trainers": {"cpu": "100m"}}, package_dir=pkg)


def test_the_local_backend_pins_a_jobs_environment_until_its_processes_end(
    platform_factory: Callable[..., Platform],
    asgi: Callable[[Platform], object],
    make_package: Callable[[dict[str, str]], Path],
) -> None:
    """Real builds (requirements files of pip options only: a venv, nothing to install), each ~30 kB;
    the cap holds one. A running job's environment stays; a finished job's goes when another is built."""
    platform = platform_factory(env_cache_bytes=40_000)
    alice = Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=asgi(platform))  # type: ignore[arg-type]
    envs = platform.ctx.config.cluster_dir / "envs"

    def tick_until(name: str, phases: set[JobPhase]) -> None:
        deadline = time.monotonic() + 60
        while alice.job(name).phase not in phases:
            assert time.monotonic() < deadline, alice.job(name)
            platform.reconciler.tick()
            time.sleep(0.1)

    _job(alice, make_package, "long", "--no-index", "import time\ntime.sleep(60)\n")
    tick_until("long", {JobPhase.RUNNING})
    (long_env,) = [p.parent for p in envs.glob(f"*/{READY}")]
    assert [p.name for p in envs.glob("*.pins/*")] == ["alice:long"]
    _job(alice, make_package, "short", "--pre", "print('done')\n")
    tick_until("short", {JobPhase.SUCCEEDED})
    assert (long_env / READY).exists()  # over the cap, but in use
    assert "more than its cap, all in use" in "".join(alice.logs("short", worker="prepare"))
    assert [p.name for p in envs.glob("*.pins/*")] == ["alice:long"]  # short's pin went with its processes

    platform.close()  # the server stops; long keeps running
    for pin in envs.glob("*.pins/*"):  # as if long had been started by a server without pins
        pin.unlink()
    second = platform_factory(data_dir=platform.ctx.config.data_dir, env_cache_bytes=40_000)  # a restart
    second.reconciler.adopt_all()
    assert [p.name for p in envs.glob("*.pins/*")] == ["alice:long"]  # adoption pins it
    alice = Client(endpoint="http://testserver", token=second.ensure_user("alice"), http=asgi(second))  # type: ignore[arg-type]
    platform = second
    _job(alice, make_package, "third", "--prefer-binary", "print('done')\n")
    tick_until("third", {JobPhase.SUCCEEDED})
    ready = sorted(p.parent.name for p in envs.glob(f"*/{READY}"))
    assert long_env.name in ready and len(ready) == 2  # short's was evicted, the running one kept
    alice.kill("long", 0.5)
    assert not list(envs.glob("*.pins/*"))
