"""Benchmark: a large `paddlecloud pfs cp` upload SIGKILLed ``--interrupts`` times, then finished.

Starts a real server on loopback (fresh data dir) and, in front of it, a byte-counting TCP relay in
this process: the CLI talks to the relay (``PADDLECLOUD_ENDPOINT``), so the bytes each attempt really
put on the wire, including the part of a chunk that was in flight when it was killed, are counted.

1. A full upload of the random ``--size-mib`` file to another name measures the transfer time T and
   the CLI's start-up time S (wall time minus the time the CLI itself reports); that copy is removed.
2. Kill points: ``--interrupts`` fractions p_1 < ... < p_n drawn uniformly (``--seed``) over the
   file. Attempt k runs ``paddlecloud pfs cp -q -j 4 SRC pfs:r.bin`` and is SIGKILLed after
   S + H + (p_k - done) * T seconds, where ``done`` is the part of the file the server already holds
   and H the time to re-read and hash that part (a restarted cp does that first), so the kills land
   across the whole transfer (not only at its start) and the same upload moves on.
3. After each kill, at once: ``paddlecloud pfs ls pfs:``, ``pfs ls -r pfs:`` and ``pfs stat pfs:r.bin``
   must show no r.bin (the file appears only when complete, by atomic rename). If r.bin is there
   whole (its size, no upload left), the kill came after the upload had completed (the estimate of T
   is coarse for small files): that attempt is the last and the remaining kills are not made.
4. Before and after each attempt the server's view of the upload is read through the SDK: POST
   /pfs/uploads with the same path, size and chunk size is "begin or resume", and answers the upload
   with the digests of the chunks it holds. (We chose this over the CLI's "sent / already there"
   line because a killed CLI prints nothing; the final attempt's line is checked against it too.)
5. A last un-killed ``pfs cp`` completes it; its "sent X, Y already there" must match the server's
   view; then the file is downloaded and its sha256 compared with the source.

Reports per attempt the wire bytes, the bytes the server kept, and what was lost (chunks cut off by
the kill), and in total the bytes sent over all attempts against the file size.

``--path http`` (the default) forces the HTTP data plane (``PADDLECLOUD_PFS_LOCAL=0``), whose bytes
the relay counts. ``--path local`` lets the CLI take the same-host fast path (the file handed over
the server's Unix socket, docs/data.md), where nothing crosses the relay: "sent" is then the bytes
the server copied in, read from its ``paddlecloud_pfs_received_bytes_total`` (``GET /metrics``).

    .venv/bin/python bench/pfs_resume.py [--size-mib 1024] [--interrupts 20] [--seed 1] [-j 4] [--path http]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import threading
import time
from pathlib import Path

from _pfs_bench import (
    MiB,
    Run,
    Server,
    Started,
    cli,
    make_random_file,
    mib,
    parse_summary,
    running_server,
    sha256_file,
)

from paddlecloud.api.files import UploadView
from paddlecloud.client import Client, load_config

CHUNK = 16 << 20  # the SDK's default chunk size (Pfs.chunk_size), which `pfs cp` uses
NAME = "r.bin"


class CountingRelay:
    """Forward 127.0.0.1:<port> to the server; count the bytes sent client -> server."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.up_bytes = 0
        self.open_conns = 0  # client connections not yet at end of stream
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            with self._lock:
                self.open_conns += 1
            threading.Thread(target=self._pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        try:
            while True:
                n = src.recv_into(buf)
                if n == 0:
                    break
                if count:
                    with self._lock:
                        self.up_bytes += n
                dst.sendall(view[:n])
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            for x in (src, dst):
                with contextlib.suppress(OSError):
                    x.shutdown(socket.SHUT_RDWR)
        finally:
            if count:
                with self._lock:
                    self.open_conns -= 1

    def drained(self, timeout: float = 30) -> int:
        """Bytes counted so far, once every client connection has ended. A killed client's socket
        buffers still hold bytes it wrote (several MiB per connection) that the kernel delivers
        after the kill; they are on the wire too, so they count for that attempt."""
        deadline = time.monotonic() + timeout
        while self.open_conns and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.up_bytes

    def close(self) -> None:
        self.sock.close()


def server_view(client: Client, full_path: str, size: int) -> UploadView:
    """Begin-or-resume: the server's upload for (user, path, size, chunk size), chunks it holds."""
    begin = {"path": full_path, "size": size, "chunk_size": CHUNK, "overwrite": False}
    return UploadView.model_validate_json(client.request("POST", "/pfs/uploads", json=begin).content)


def held_bytes(view: UploadView) -> int:
    return sum(min(view.chunk_size, view.size - i * view.chunk_size) for i in view.received)


def rehash_seconds_per_byte(src: Path, j: int) -> float:
    """Time to pread + BLAKE3 one chunk, spread over min(j, cores) threads, per byte."""
    from paddlecloud.core.checksum import chunk_digest

    fd = os.open(src, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        n = 4
        for i in range(n):
            chunk_digest(os.pread(fd, CHUNK, i * CHUNK))
        per_byte = (time.perf_counter() - t0) / (n * CHUNK)
    finally:
        os.close(fd)
    return per_byte / max(min(j, os.cpu_count() or 1), 1)


def visible_after_kill(srv: Server, size: int) -> bool:
    """Right after a kill: is r.bin in the namespace? Only as the whole file (the kill landed after
    the upload had completed); a partial r.bin anywhere in ``pfs ls``, ``pfs ls -r`` or ``pfs stat``
    ends the benchmark."""
    seen = []
    for args in (("pfs", "ls", "pfs:"), ("pfs", "ls", "-r", "pfs:")):
        r = cli(srv, *args).check()
        seen.append(NAME in r.stdout)
    r = cli(srv, "pfs", "stat", "-o", "json", f"pfs:{NAME}")
    seen.append(r.rc == 0)
    if not any(seen):
        if "no such file" not in r.stdout + r.stderr:
            raise SystemExit(f"pfs stat pfs:{NAME} after a kill: rc {r.rc}\n{r.stdout}{r.stderr}")
        return False
    du = cli(srv, "pfs", "du").check().stdout
    if all(seen) and json.loads(r.stdout)["size"] == size and ", 0 B in uploads" in du:
        return True
    raise SystemExit(f"partial upload visible after a kill (ls, ls -r, stat: {seen}):\n{r.stdout}\n{du}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--interrupts", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-j", type=int, default=4, help="pfs cp -j (transfers in flight)")
    ap.add_argument("--path", choices=["http", "local"], default="http", help="the data plane the CLI uses")
    args = ap.parse_args()
    size = args.size_mib * MiB
    rng = random.Random(args.seed)

    with running_server() as (srv, work):
        relay = CountingRelay(srv.port)
        env = dict(srv.env, PADDLECLOUD_ENDPOINT=f"http://127.0.0.1:{relay.port}")
        if args.path == "http":
            env["PADDLECLOUD_PFS_LOCAL"] = "0"
        os.environ["PADDLECLOUD_CONFIG"] = srv.env["PADDLECLOUD_CONFIG"]
        cfg = load_config()
        assert cfg.current is not None
        client = Client(cfg.current.endpoint, cfg.current.token)  # direct, not through the relay

        def drained() -> int:
            """Bytes sent so far: on the wire (http), or copied in by the server (local)."""
            if args.path == "http":
                return relay.drained()
            text = client.pfs.session.http.get("/metrics").text
            line = next(x for x in text.splitlines() if x.startswith("paddlecloud_pfs_received_bytes_total"))
            return int(float(line.split()[-1]))

        full = client.pfs.full(f"pfs:{NAME}")

        src = work / "src.bin"
        sha = make_random_file(src, size)

        # 1. scale: one full upload (through the relay, like the attempts)
        t = cli(srv, "pfs", "cp", "-q", "-j", str(args.j), str(src), "pfs:scale.bin", env=env).check()
        xfer = parse_summary(t.stderr).secs
        startup = max(t.wall - xfer, 0.0)
        cli(srv, "pfs", "rm", "pfs:scale.bin").check()
        # a restarted cp first reads and hashes the chunks the server already holds (to compare digests)
        rehash = rehash_seconds_per_byte(src, args.j)
        print(f"full upload of {args.size_mib} MiB through the relay: {t.wall:.2f} s wall "
              f"(CLI reports {xfer:.1f} s of transfer; start-up ~{startup:.2f} s)", flush=True)  # fmt: skip

        # 2.-4. the killed attempts
        points = sorted(rng.uniform(0.0, 1.0) for _ in range(args.interrupts))
        rows = []
        final: tuple[int, int, Run] | None = None  # (before, wire, run) of the attempt that completed
        for k, p in enumerate(points, 1):
            before = held_bytes(server_view(client, full, size))
            delay = startup + before * rehash + max(p - before / size, 0.0) * xfer
            sent0 = drained()
            att = Started(["pfs", "cp", "-q", "-j", str(args.j), str(src), f"pfs:{NAME}"], env)
            deadline = att.t0 + delay
            while not att.exited() and time.perf_counter() < deadline:
                time.sleep(0.002)
            killed = not att.exited()
            if killed:
                att.proc.send_signal(signal.SIGKILL)
            r = att.finish()
            wire = drained() - sent0
            if not killed or visible_after_kill(srv, size):
                # the kill came too late (the estimate of the transfer time is coarse for small files):
                # this attempt completed the upload, so it is the last one
                print(f"  attempt {k:2}: completed before its kill at {delay:.2f} s (rc {r.rc}); "
                      f"already there {mib(before)}, sent {mib(wire)}; no more kills possible",
                      flush=True)  # fmt: skip
                final = (before, wire, r)
                break
            after = held_bytes(server_view(client, full, size))
            missing = size - before
            rows.append((k, p, delay, before, wire, after - before))
            if wire > missing + 64 * 1024:  # headers of a few requests at most on top of the body bytes
                raise SystemExit(f"attempt {k} sent {wire} bytes but only {missing} were missing")
            print(f"  attempt {k:2}: killed at {delay:5.2f} s (target {p:4.0%}); already there "
                  f"{mib(before):>10}, sent {mib(wire):>10}, kept {mib(after - before):>10}, "
                  f"lost {mib(wire - (after - before)):>9}; r.bin not visible", flush=True)  # fmt: skip

        # 5. the last, un-killed attempt
        if final is None:
            before = held_bytes(server_view(client, full, size))
            sent0 = drained()
            r = cli(srv, "pfs", "cp", "-q", "-j", str(args.j), str(src), f"pfs:{NAME}", env=env).check()
            final_wire = drained() - sent0
            s = parse_summary(r.stderr)
            tol = 0.06 * MiB  # the CLI prints one decimal of MiB/GiB
            tol_g = 0.06 * (1 << 30)
            if abs(s.skipped - before) > (tol_g if before >= 1 << 30 else tol) or abs(
                s.sent - (size - before)
            ) > (tol_g if size - before >= 1 << 30 else tol):
                raise SystemExit(f"final attempt: CLI says {r.stderr.strip()!r}; server held {before} bytes")
            print(f"  final     : completed in {r.wall:.2f} s; already there {mib(before)}, "
                  f"sent {mib(final_wire)} (CLI: {r.stderr.strip().splitlines()[-1]})",
                  flush=True)  # fmt: skip
        else:
            before, final_wire, r = final
        if not (size - before <= final_wire <= size - before + 64 * 1024):
            raise SystemExit(f"final attempt put {final_wire} bytes on the wire; "
                             f"{size - before} were missing")  # fmt: skip

        out = work / "r.out"
        cli(srv, "pfs", "cp", "-q", f"pfs:{NAME}", str(out)).check()
        got = sha256_file(out)
        if got != sha:
            raise SystemExit(f"downloaded pfs:{NAME} differs from the source: sha256 {got} != {sha}")
        du = cli(srv, "pfs", "du").check().stdout.strip()
        relay.close()

    total_wire = sum(row[4] for row in rows) + final_wire
    lost = sum(row[4] - row[5] for row in rows)
    useless = sum(1 for row in rows if row[5] == 0)
    print(f"pfs cp of one {args.size_mib} MiB file, -j {args.j}, {CHUNK >> 20} MiB chunks, "
          f"SIGKILLed {len(rows)} times then completed (seed {args.seed})")  # fmt: skip
    if len(rows) < args.interrupts:
        print(f"  NOTE: only {len(rows)} of {args.interrupts} kills landed before the upload completed")
    print(f"  bytes sent over all {len(rows) + 1} attempts: {mib(total_wire)} = "
          f"{total_wire / size:.3f} x the file ({(total_wire - size) / size:+.1%} overhead); "
          f"lost to kills {mib(lost)} (chunks cut off in flight)")  # fmt: skip
    print(f"  {useless} of {len(rows)} killed attempts kept no chunk (killed before any chunk finished)")
    print("  every attempt sent at most what the server was missing (+ request headers); "
          "the final one exactly the missing chunks")  # fmt: skip
    print("  no partial r.bin ever visible after a kill (pfs ls, pfs ls -r, pfs stat); "
          f"download sha256 matches the source; after: {du}")  # fmt: skip


if __name__ == "__main__":
    main()
