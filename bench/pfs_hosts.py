"""Benchmark: `paddlecloud pfs cp` from another host against rsync over the same link, on a bed of
hosts (``scripts/ensure-hosts.sh``: network namespaces with their own addresses and ``/tmp``).

The server runs on ``head`` (``up --backend local --host <head>``, data dir in head's own ``/tmp``,
on this machine's disk), an rsync daemon beside it (``rsync --daemon`` on head's address, one
writable module in head's ``/tmp``); the client is on ``laptop``, which reaches head only over the
bed's bridge (its files in the laptop's own ``/tmp``). Per run and size, interleaved, each after a
``sync``, timed on the laptop (wall time of the whole command, process start to exit):

* ``rsync --whole-file --fsync SRC rsync://<head>:PORT/bench/NAME`` (up) and back (down);
* ``paddlecloud pfs cp -q -j N SRC pfs:NAME`` and back, per ``--paths``: ``data`` (the default
  client: chunks on the server's PFS data port, ``server/pfs_data.py``) and ``api`` (every chunk
  through the API, ``PADDLECLOUD_PFS_DATA=0``: the data plane before the port).

Before the bed starts, fresh memory is touched once (``--touch-gib``, ``_pfs_bench.touch_memory``):
on a VM the first use of a page of guest memory since boot costs the hypervisor's fault (~3 ms a
MiB here), which the page cache passes on to whichever copy happens to write into such pages
(one 256 MiB download measured 1.0 s of system time into fresh pages, 0.2 s into reused ones).

Every download's sha256 is checked against the source. Prints medians, the ratio rsync time / pfs
time per direction (goal: >= 1.0), CPU seconds of client and server, and their peak RSS (client:
``ru_maxrss``; server: VmRSS sampled every 10 ms) to show memory flat in the file size.

The bed is its own (``--bed-dir``, ``--bed-net``: not the tests' bed), hosts only (no Slurm), and
stopped at the end unless it was running before.

    .venv/bin/python bench/pfs_hosts.py [--sizes-mib 256 2048] [--runs 3] [-j 4] [--paths data api]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from _pfs_bench import (
    MiB,
    RssSampler,
    compile_package,
    make_random_file,
    parse_summary,
    proc_cpu_seconds,
    sha256_file,
    touch_memory,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ensure-hosts.sh"
PADDLECLOUD = str(ROOT / ".venv" / "bin" / "paddlecloud")
PYTHON = str(ROOT / ".venv" / "bin" / "python")
PORT, RSYNC_PORT = 8090, 8730
#: run on the laptop: CMD, then "BENCH <wall s> <peak RSS KiB> <CPU s>" on stderr
TIMER = (
    "import resource,subprocess,sys,time\n"
    "t=time.perf_counter(); r=subprocess.run(sys.argv[1:]); w=time.perf_counter()-t\n"
    "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(f'BENCH {w:.4f} {u.ru_maxrss} {u.ru_utime + u.ru_stime:.3f}', file=sys.stderr)\n"
    "sys.exit(r.returncode)"
)


@dataclass
class Series:
    wall: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)  # the copy alone, as pfs cp reports it
    client_cpu: list[float] = field(default_factory=list)
    client_kib: list[int] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    server_kib: list[int] = field(default_factory=list)


class Bed:
    def __init__(self, bed_dir: str, net: str) -> None:
        self.env = {**os.environ, "PADDLECLOUD_HOSTS_DIR": bed_dir, "PADDLECLOUD_HOSTS_NET": net,
                    "PADDLECLOUD_HOSTS_SLURM": "0", "PADDLECLOUD_HOSTS_COMPUTE": "1"}  # fmt: skip
        self.dir = Path(bed_dir)
        self.was_running = self._sh("status").returncode == 0
        started = self._sh("start", timeout=600)
        if started.returncode != 0:
            raise SystemExit(f"the bed did not start: {started.stderr}")
        hosts = self._sh("hosts").stdout.split()
        self.addr = dict(zip(hosts[::2], hosts[1::2], strict=True))

    def _sh(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env, check=False)  # fmt: skip

    def tmp(self, host: str) -> Path:
        """The host's own /tmp, as this machine sees it."""
        return self.dir / "hosts" / host / "tmp"

    def argv(self, host: str, *cmd: str) -> list[str]:
        return ["bash", str(SCRIPT), "exec", host, *cmd]

    def stop(self) -> None:
        if not self.was_running:
            self._sh("stop", timeout=300)


def timed(bed: Bed, env: dict[str, str], *cmd: str) -> tuple[float, int, float, str]:
    """``cmd`` on the laptop: wall seconds, peak RSS (KiB), CPU seconds, its stderr."""
    proc = subprocess.run(bed.argv("laptop", PYTHON, "-c", TIMER, *cmd), capture_output=True, text=True,
                          env={**bed.env, **env}, timeout=1800, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"laptop: {' '.join(cmd)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}")
    lines = proc.stderr.splitlines()
    bench = [x for x in lines if x.startswith("BENCH ")][-1].split()
    rest = "\n".join(x for x in lines if not x.startswith("BENCH "))
    return float(bench[1]), int(bench[2]), float(bench[3]), rest


@contextlib.contextmanager
def server_and_rsync(bed: Bed) -> Iterator[tuple[int, dict[str, str]]]:
    """``up`` on head and an rsync daemon beside it; yields the server's pid and the laptop's CLI
    environment (logged in)."""
    work = bed.tmp("head") / "pcb"
    shutil.rmtree(work, ignore_errors=True)
    (work / "rsync").mkdir(parents=True)
    (work / "rsyncd.conf").write_text(
        "use chroot = no\n[bench]\n  path = /tmp/pcb/rsync\n  read only = no\n  uid = root\n  gid = root\n"
    )
    head = bed.addr["head"]
    log = open(work / "server.log", "wb")  # noqa: SIM115 - closed below
    srv = subprocess.Popen(
        bed.argv("head", PADDLECLOUD, "up", "--backend", "local", "--host", head, "--port", str(PORT),
                 "--data-dir", "/tmp/pcb/data", "--storage-quota", "none"),
        stdout=log, stderr=subprocess.STDOUT, env={**bed.env, "PADDLECLOUD_CONFIG": "/tmp/pcb/head-config"},
    )  # fmt: skip
    daemon = ["rsync", "--daemon", "--no-detach", "--address", head, f"--port={RSYNC_PORT}",
              "--config=/tmp/pcb/rsyncd.conf"]  # fmt: skip
    rsync = subprocess.Popen(bed.argv("head", *daemon), env=bed.env)
    env = {"PADDLECLOUD_CONFIG": "/tmp/pcb/config"}
    try:
        for _ in range(600):
            health = f"http://{head}:{PORT}/api/v1/health"
            probe = subprocess.run(bed.argv("laptop", "curl", "-sf", "-m", "1", health), capture_output=True,
                                   env=bed.env, check=False)  # fmt: skip
            if probe.returncode == 0 and (work / "head-config").exists():
                break
            if srv.poll() is not None:
                raise SystemExit((work / "server.log").read_text()[-3000:])
            time.sleep(0.1)
        config = yaml.safe_load((work / "head-config").read_text())
        token = config["datacenters"][config["current"]]["token"]
        timed(bed, env, PADDLECLOUD, "login", "--endpoint", f"http://{head}:{PORT}", "--token", token)
        print(f"server on head ({head}:{PORT}): {(work / 'server.log').read_text().strip().splitlines()[:3]}")
        yield srv.pid, env
    finally:
        for p in (srv, rsync):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(bed.tmp("laptop") / "pcb", ignore_errors=True)


def one_size(bed: Bed, server: int, env: dict[str, str], mib: int, args: argparse.Namespace) -> None:
    laptop = bed.tmp("laptop") / "pcb"
    laptop.mkdir(parents=True, exist_ok=True)
    name = f"f{mib}.bin"
    src, out = laptop / name, laptop / "out.bin"
    sha = make_random_file(src, mib * MiB)
    stored = bed.tmp("head") / "pcb" / "rsync" / name
    rsync_url = f"rsync://{bed.addr['head']}:{RSYNC_PORT}/bench/{name}"
    series: dict[str, Series] = {}

    def measure(key: str, cmd: list[str], extra: dict[str, str]) -> None:
        s = series.setdefault(key, Series())
        os.sync()
        cpu0 = proc_cpu_seconds(server)
        with RssSampler(server) as rss:
            wall, kib, cpu, err = timed(bed, {**env, **extra}, *cmd)
        s.wall.append(wall)
        s.client_kib.append(kib)
        s.client_cpu.append(cpu)
        if key.startswith("pfs"):
            s.engine.append(parse_summary(err).secs)
            s.server_cpu.append(proc_cpu_seconds(server) - cpu0)
            s.server_kib.append(rss.max_kib)

    def check(what: str) -> None:
        got = sha256_file(out)
        if got != sha:
            raise SystemExit(f"{what}: sha256 {got} != {sha}")
        out.unlink()

    for run in range(args.runs):
        stored.unlink(missing_ok=True)
        measure("rsync up", ["rsync", "--whole-file", "--fsync", f"/tmp/pcb/{name}", rsync_url], {})
        measure("rsync down", ["rsync", "--whole-file", "--fsync", rsync_url, "/tmp/pcb/out.bin"], {})
        check("rsync down")
        line = [f"rsync up {series['rsync up'].wall[-1]:.2f} s, down {series['rsync down'].wall[-1]:.2f} s"]
        for path in args.paths:
            extra = {"PADDLECLOUD_PFS_DATA": "0"} if path == "api" else {}
            subprocess.run(bed.argv("laptop", PADDLECLOUD, "pfs", "rm", f"pfs:{name}"), capture_output=True,
                           env={**bed.env, **env}, check=False)  # fmt: skip
            j = ["-j", str(args.j)]
            measure(
                f"pfs {path} up",
                [PADDLECLOUD, "pfs", "cp", "-q", *j, f"/tmp/pcb/{name}", f"pfs:{name}"],
                extra,
            )
            measure(
                f"pfs {path} down",
                [PADDLECLOUD, "pfs", "cp", "-q", *j, f"pfs:{name}", "/tmp/pcb/out.bin"],
                extra,
            )
            check(f"pfs {path} down")
            line.append(f"pfs {path} up {series[f'pfs {path} up'].wall[-1]:.2f} s, "
                        f"down {series[f'pfs {path} down'].wall[-1]:.2f} s")  # fmt: skip
        print(f"  {mib} MiB run {run + 1}: " + "; ".join(line) + " (sha256 ok)", flush=True)
    src.unlink()
    stored.unlink(missing_ok=True)
    report(mib, series, args)


def report(mib: int, series: dict[str, Series], args: argparse.Namespace) -> None:
    med = statistics.median
    print(f"one {mib} MiB file from the laptop to head and back, -j {args.j}; median of {args.runs} runs")
    for key, s in series.items():
        t = med(s.wall)
        direction = key.rsplit(" ", 1)[1]
        ratio = (
            "" if key.startswith("rsync") else f"  {med(series[f'rsync {direction}'].wall) / t:4.2f} x rsync"
        )
        spread = f"(min {min(s.wall):.2f}, max {max(s.wall):.2f})"
        print(f"  {key:<15} {t:6.2f} s {mib / t:6.0f} MiB/s {spread}{ratio}")
        srv = (
            f"; server CPU {med(s.server_cpu):5.2f} s, peak RSS {max(s.server_kib) / 1024:4.0f} MiB"
            if s.server_kib
            else ""
        )
        client = f"client CPU {med(s.client_cpu):5.2f} s, peak RSS {max(s.client_kib) / 1024:4.0f} MiB"
        print(f"  {'':<15} {client}{srv}")
        if s.engine:
            e = med(s.engine)
            rsync = med(series[f"rsync {direction}"].wall)
            print(f"  {'':<15} the copy alone (as pfs cp reports it, the CLI's start-up and exit left out) "
                  f"{e:5.2f} s, {rsync / e:4.2f} x rsync")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 2048])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-j", type=int, default=4, help="pfs cp -j (transfers in flight)")
    ap.add_argument("--paths", nargs="+", choices=["data", "api"], default=["data", "api"])
    ap.add_argument(
        "--touch-gib",
        type=float,
        default=None,
        help="fresh memory touched once first (default: 3 x the sizes + 1 GiB; 0: none)",
    )
    ap.add_argument("--bed-dir", default="/var/lib/paddlecloud-bench-hosts")
    ap.add_argument("--bed-net", default="10.78.0")
    args = ap.parse_args()
    if shutil.which("rsync") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "rsync"], check=True, capture_output=True)
    compile_package()
    touch = args.touch_gib if args.touch_gib is not None else 3 * sum(args.sizes_mib) / 1024 + 1
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    touch_bytes = int(min(touch * 1024 * MiB, max(available - 2048 * MiB, 0)))
    if touch_bytes:
        took = touch_memory(touch_bytes)
        per_mib = took * 1000 / (touch_bytes / MiB)
        print(f"touched {touch_bytes / MiB / 1024:.1f} GiB of fresh memory once in {took:.1f} s "
              f"({per_mib:.2f} ms a MiB), so that no copy pays its first use")  # fmt: skip
    bed = Bed(args.bed_dir, args.bed_net)
    try:
        with server_and_rsync(bed) as (server, env):
            print(
                f"{os.cpu_count()} cores; laptop {bed.addr['laptop']} -> head {bed.addr['head']}", flush=True
            )
            for mib in args.sizes_mib:
                one_size(bed, server, env, mib, args)
    finally:
        bed.stop()


if __name__ == "__main__":
    main()
