"""Benchmark: `paddlecloud pfs cp` of one large file, up and down, against a plain local `cp`.

Starts a real server on loopback (fresh data dir), writes a random file of ``--size-mib`` MiB, and per
run times (after a ``sync`` each, wall time of the whole command):

* ``cp SRC DST`` (a local copy; the written pages may still be dirty) and ``cp`` + ``sync``;
* ``paddlecloud pfs cp -q -j N SRC pfs:big.bin`` (upload; the server fsyncs before its atomic rename);
* ``paddlecloud pfs cp -q -j N pfs:big.bin OUT`` (download; the client fsyncs and compares the
  whole-file checksum with the server's), then checks the sha256 of OUT against the source.

Prints medians, MiB/s, and each as a ratio of cp's throughput (goal: >= 0.7 of cp) and of cp+sync's.
Memory: the CLI's peak RSS (``wait4`` ru_maxrss of that process) and the server's peak VmRSS sampled
every 10 ms during each transfer, plus the server's VmHWM; first for one ``--rss-mib`` MiB file on the
fresh server, then for the main size, to show that memory does not grow with the file.

    .venv/bin/python bench/pfs_throughput.py [--size-mib 1024] [--runs 3] [-j 4] [--rss-mib 256]
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


@dataclass
class Mem:
    """Per transfer: peak RSS (KiB) and CPU seconds of the CLI process and of the server."""

    client_kib: list[int] = field(default_factory=list)
    server_kib: list[int] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def upload(srv: Server, src: Path, name: str, j: int, mem: Mem) -> float:
    cli(srv, "pfs", "rm", f"pfs:{name}")  # absent on the first run: the error is ignored
    sync()
    assert srv.proc is not None
    cpu0 = proc_cpu_seconds(srv.proc.pid)
    with RssSampler(srv.proc.pid) as s:
        r = cli(srv, "pfs", "cp", "-q", "-j", str(j), str(src), f"pfs:{name}").check()
    mem.server_cpu.append(proc_cpu_seconds(srv.proc.pid) - cpu0)
    mem.client_cpu.append(r.cpu)
    summary = parse_summary(r.stderr)
    assert summary.skipped == 0, f"a fresh upload found bytes already there: {r.stderr}"
    mem.client_kib.append(r.maxrss_kib)
    mem.server_kib.append(s.max_kib)
    return r.wall


def download(srv: Server, name: str, out: Path, j: int, mem: Mem, want_sha: str) -> float:
    out.unlink(missing_ok=True)
    sync()
    assert srv.proc is not None
    cpu0 = proc_cpu_seconds(srv.proc.pid)
    with RssSampler(srv.proc.pid) as s:
        r = cli(srv, "pfs", "cp", "-q", "-j", str(j), f"pfs:{name}", str(out)).check()
    mem.server_cpu.append(proc_cpu_seconds(srv.proc.pid) - cpu0)
    mem.client_cpu.append(r.cpu)
    mem.client_kib.append(r.maxrss_kib)
    mem.server_kib.append(s.max_kib)
    got = sha256_file(out)
    if got != want_sha:
        raise SystemExit(f"download of pfs:{name} differs from the source: sha256 {got} != {want_sha}")
    return r.wall


def local_cp(src: Path, dst: Path) -> tuple[float, float]:
    dst.unlink(missing_ok=True)
    sync()
    t_cp = timed(["cp", str(src), str(dst)])
    t_sync = timed(["sync"])
    dst.unlink()
    return t_cp, t_cp + t_sync


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-j", type=int, default=4, help="pfs cp -j (transfers in flight)")
    ap.add_argument("--rss-mib", type=int, default=256, help="the smaller file of the memory comparison")
    args = ap.parse_args()
    size: int = args.size_mib * MiB

    with running_server() as (srv, work):
        assert srv.proc is not None
        pid = srv.proc.pid
        idle_rss = proc_status_kib(pid, "VmRSS")

        # memory with the small file first, on the fresh server (VmHWM only ever grows)
        small = work / "small.bin"
        small_sha = make_random_file(small, args.rss_mib * MiB)
        small_up, small_down = Mem(), Mem()
        t_small_up = upload(srv, small, "small.bin", args.j, small_up)
        t_small_down = download(srv, "small.bin", work / "small.out", args.j, small_down, small_sha)
        hwm_small = proc_status_kib(pid, "VmHWM")
        cli(srv, "pfs", "rm", "pfs:small.bin").check()
        small.unlink()
        (work / "small.out").unlink()

        src = work / "big.bin"
        t0 = time.perf_counter()
        sha = make_random_file(src, size)
        print(f"wrote {args.size_mib} MiB of random data in {time.perf_counter() - t0:.1f} s", flush=True)
        big_up, big_down = Mem(), Mem()
        cp, cps, up, down = [], [], [], []
        for i in range(args.runs):
            t_cp, t_cps = local_cp(src, work / "cp.bin")
            t_up = upload(srv, src, "big.bin", args.j, big_up)
            t_down = download(srv, "big.bin", work / "big.out", args.j, big_down, sha)
            (work / "big.out").unlink()
            cp.append(t_cp)
            cps.append(t_cps)
            up.append(t_up)
            down.append(t_down)
            print(f"  run {i + 1}: cp {t_cp:.2f} s, cp+sync {t_cps:.2f} s, "
                  f"upload {t_up:.2f} s, download {t_down:.2f} s (sha256 ok)", flush=True)  # fmt: skip
        hwm_big = proc_status_kib(pid, "VmHWM")

    def rate(t: float) -> float:
        return size / MiB / t

    m_cp, m_cps = statistics.median(cp), statistics.median(cps)
    print(f"pfs cp of one {args.size_mib} MiB file, -j {args.j}, real server on loopback; "
          f"median of {args.runs} runs (wall time of the whole command)")  # fmt: skip
    print(f"  local cp               {m_cp:6.2f} s  {rate(m_cp):7.0f} MiB/s")
    print(f"  local cp + sync        {m_cps:6.2f} s  {rate(m_cps):7.0f} MiB/s")
    for name, ts in (("upload", up), ("download", down)):
        m = statistics.median(ts)
        print(f"  pfs cp {name:<12} {m:6.2f} s  {rate(m):7.0f} MiB/s   "
              f"{m_cp / m:.2f} x cp, {m_cps / m:.2f} x cp+sync   "
              f"(min {min(ts):.2f}, max {max(ts):.2f})")  # fmt: skip
    print("  goal: >= 0.70 x cp")
    print("CPU seconds per transfer (median; the machine has "
          f"{os.cpu_count()} cores, so at most {os.cpu_count()} x wall)")  # fmt: skip
    for name, ts, m_ in (("upload", up, big_up), ("download", down, big_down)):
        c, sv = statistics.median(m_.client_cpu), statistics.median(m_.server_cpu)
        print(f"  {name:<8}: client {c:5.2f} s + server {sv:5.2f} s = {c + sv:5.2f} s "
              f"over {statistics.median(ts):.2f} s wall")  # fmt: skip
    print(f"memory (server idle VmRSS {idle_rss / 1024:.0f} MiB); peak RSS per transfer, max over runs")
    small_note = f"1 run: up {t_small_up:.2f} s, down {t_small_down:.2f} s"
    rows = (
        (args.rss_mib, small_up, small_down, hwm_small, small_note),
        (args.size_mib, big_up, big_down, hwm_big, f"{args.runs} runs"),
    )
    for mb, m_up, m_down, hwm, note in rows:
        print(f"  {mb:>5} MiB file: client up {max(m_up.client_kib) / 1024:4.0f} MiB, "
              f"down {max(m_down.client_kib) / 1024:4.0f} MiB; "
              f"server VmRSS up {max(m_up.server_kib) / 1024:4.0f} MiB, "
              f"down {max(m_down.server_kib) / 1024:4.0f} MiB; "
              f"server VmHWM after {hwm / 1024:4.0f} MiB   ({note})")  # fmt: skip


if __name__ == "__main__":
    main()
