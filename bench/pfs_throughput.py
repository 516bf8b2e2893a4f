"""Benchmark: `paddlecloud pfs cp` of one large file, up and down, against an rsync daemon on loopback.

Starts a real server on loopback (fresh data dir) and an rsync daemon (``rsync --daemon`` on
127.0.0.1, one writable module; Debian's ``rsync`` is installed first if missing), writes a random
file per ``--sizes-mib`` size, and per run times, interleaved and each after a ``sync`` (wall time of
the whole command, process start to exit):

* ``rsync --whole-file --fsync SRC rsync://127.0.0.1:PORT/bench/NAME`` (up) and back (down);
* ``paddlecloud pfs cp -q -j N SRC pfs:NAME`` (up; the server fsyncs before its atomic rename) and
  ``paddlecloud pfs cp -q -j N pfs:NAME OUT`` (down; the client fsyncs and compares the whole-file
  checksum with the server's), each path of ``--paths``: ``local`` is the default client (the
  same-host fast path when it applies), ``http`` forces the HTTP data plane
  (``PADDLECLOUD_PFS_LOCAL=0``);
* ``cp`` + ``sync`` as the floor.

Every downloaded copy (rsync's and pfs's) has its sha256 checked against the source. Prints medians,
MiB/s, the ratio rsync time / pfs time per direction (goal: >= 1.0: pfs at least as fast; also for
the copy alone as ``pfs cp`` reports it, without the CLI's Python start-up), CPU
seconds, and peak RSS of the CLI (``wait4`` ru_maxrss) and of the server (VmRSS sampled every 10 ms)
per size, to show that memory does not grow with the file.

    .venv/bin/python bench/pfs_throughput.py [--sizes-mib 512 2048] [--runs 3] [-j 4] [--paths local http]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from _pfs_bench import (
    MiB,
    RssSampler,
    RsyncDaemon,
    Server,
    cli,
    make_random_file,
    parse_summary,
    proc_cpu_seconds,
    proc_status_kib,
    running_server,
    sha256_file,
    sync,
)

HTTP_ONLY = {"PADDLECLOUD_PFS_LOCAL": "0"}


@dataclass
class Series:
    """One kind of transfer at one size: wall times, CPU seconds and peak RSS (KiB) per run."""

    wall: list[float] = field(default_factory=list)
    #: the copy alone, as ``pfs cp`` reports it (the CLI's start-up and exit left out)
    engine: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    client_kib: list[int] = field(default_factory=list)
    server_kib: list[int] = field(default_factory=list)


def pfs(srv: Server, series: Series, path: str, *args: str) -> None:
    assert srv.proc is not None
    env = {**srv.env, **(HTTP_ONLY if path == "http" else {})}
    cpu0 = proc_cpu_seconds(srv.proc.pid)
    with RssSampler(srv.proc.pid) as s:
        r = cli(srv, "pfs", "cp", "-q", *args, env=env).check()
    series.server_cpu.append(proc_cpu_seconds(srv.proc.pid) - cpu0)
    series.wall.append(r.wall)
    series.engine.append(parse_summary(r.stderr).secs)
    series.client_cpu.append(r.cpu)
    series.client_kib.append(r.maxrss_kib)
    series.server_kib.append(s.max_kib)


def check_sha(path: Path, want: str, what: str) -> None:
    got = sha256_file(path)
    if got != want:
        raise SystemExit(f"{what}: sha256 {got} != source {want}")
    path.unlink()


def cp_sync(src: Path, dst: Path) -> float:
    dst.unlink(missing_ok=True)
    sync()
    t0 = time.perf_counter()
    subprocess.run(["cp", str(src), str(dst)], check=True)
    os.sync()
    t = time.perf_counter() - t0
    dst.unlink()
    return t


def one_size(srv: Server, rsync: RsyncDaemon, work: Path, mib: int, args: argparse.Namespace) -> None:
    src = work / f"f{mib}.bin"
    name = src.name
    sha = make_random_file(src, mib * MiB)
    out = work / "out.bin"
    series: dict[str, Series] = {}
    floor: list[float] = []
    j = ["-j", str(args.j)]
    for run in range(args.runs):
        floor.append(cp_sync(src, work / "cp.bin"))
        r_up = rsync.up(src, name)
        r_down = rsync.down(name, out)
        for key, r in (("rsync up", r_up), ("rsync down", r_down)):
            s = series.setdefault(key, Series())
            s.wall.append(r.wall)
            s.client_cpu.append(r.cpu)
            s.client_kib.append(r.maxrss_kib)
        check_sha(out, sha, "rsync download")
        line = [f"rsync up {r_up.wall:.2f} s, down {r_down.wall:.2f} s"]
        for path in args.paths:
            cli(srv, "pfs", "rm", f"pfs:{name}")  # absent on the first run: the error is ignored
            sync()
            pfs(srv, series.setdefault(f"pfs {path} up", Series()), path, *j, str(src), f"pfs:{name}")
            out.unlink(missing_ok=True)
            sync()
            pfs(srv, series.setdefault(f"pfs {path} down", Series()), path, *j, f"pfs:{name}", str(out))
            check_sha(out, sha, f"pfs ({path}) download")
            line.append(f"pfs {path} up {series[f'pfs {path} up'].wall[-1]:.2f} s, "
                        f"down {series[f'pfs {path} down'].wall[-1]:.2f} s")  # fmt: skip
        print(f"  {mib} MiB run {run + 1}: cp+sync {floor[-1]:.2f} s; " + "; ".join(line) + " (sha256 ok)",
              flush=True)  # fmt: skip
    src.unlink()
    (rsync.root / name).unlink(missing_ok=True)
    report(mib, series, floor, args)


def report(mib: int, series: dict[str, Series], floor: list[float], args: argparse.Namespace) -> None:
    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    print(
        f"one {mib} MiB file, -j {args.j}, loopback; median of {args.runs} runs (wall time of each command)"
    )
    print(f"  cp + sync          {med(floor):6.2f} s  {mib / med(floor):6.0f} MiB/s")
    for key, s in series.items():
        t = med(s.wall)
        direction = key.rsplit(" ", 1)[1]
        ratio = ""
        if not key.startswith("rsync"):
            ratio = f"  {med(series[f'rsync {direction}'].wall) / t:4.2f} x rsync (>= 1.0: as fast or faster)"
        srv_cpu = f" + server {med(s.server_cpu):5.2f}" if s.server_cpu else ""
        srv_rss = f", server {max(s.server_kib) / 1024:4.0f} MiB" if s.server_kib else ""
        spread = f"(min {min(s.wall):.2f}, max {max(s.wall):.2f})"
        print(f"  {key:<18} {t:6.2f} s  {mib / t:6.0f} MiB/s  {spread}{ratio}")
        if s.engine:
            e = med(s.engine)
            print(f"  {'':<18} the copy alone (as pfs cp reports it, start-up excluded) {e:5.2f} s, "
                  f"{med(series[f'rsync {direction}'].wall) / e:4.2f} x rsync")  # fmt: skip
        print(f"  {'':<18} CPU client {med(s.client_cpu):5.2f}{srv_cpu} s; peak RSS client "
              f"{max(s.client_kib) / 1024:4.0f} MiB{srv_rss}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-j", type=int, default=4, help="pfs cp -j (transfers in flight)")
    ap.add_argument("--paths", nargs="+", choices=["local", "http"], default=["local", "http"])
    args = ap.parse_args()
    with running_server() as (srv, work), RsyncDaemon(work.parent / "rsync") as rsync:
        assert srv.proc is not None
        print(f"server idle VmRSS {proc_status_kib(srv.proc.pid, 'VmRSS') / 1024:.0f} MiB; "
              f"{os.cpu_count()} cores; rsync daemon on 127.0.0.1:{rsync.port}", flush=True)  # fmt: skip
        for mib in args.sizes_mib:
            one_size(srv, rsync, work, mib, args)
            print(f"  server VmHWM after {mib} MiB: {proc_status_kib(srv.proc.pid, 'VmHWM') / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
