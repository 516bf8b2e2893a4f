"""Benchmark: `paddlecloud pfs cp -r` of a tree of many small files, up and down.

Starts a real server on loopback (fresh data dir), writes ``--files`` random files of sizes drawn
around ``--size`` bytes (uniform in [size/2, 3*size/2]) over a few nested directories
(``dNN/`` and ``dNN/sNN/``, ``--dirs`` of each), then times (wall time of the whole command):

* ``paddlecloud pfs cp -r -q -j N TREE pfs:tree`` (upload), and
* ``paddlecloud pfs cp -r -q -j N pfs:tree OUT`` (download into a fresh directory),

checks that OUT holds exactly the same relative paths, each byte-identical (sha256 of every file),
and prints files/s and MiB/s for both.

    .venv/bin/python bench/pfs_tree.py [--files 10000] [--size 1024] [--dirs 10] [-j 4] [--seed 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import time
from pathlib import Path

from _pfs_bench import MiB, RssSampler, cli, parse_summary, running_server, sync


def make_tree(root: Path, files: int, size: int, dirs: int, rng: random.Random) -> dict[str, str]:
    """The tree; returns relative path -> sha256."""
    places = [""]
    for d in range(dirs):
        places.append(f"d{d:02}/")
        places.extend(f"d{d:02}/s{s:02}/" for s in range(3))
    for p in places:
        (root / p).mkdir(parents=True, exist_ok=True)
    want: dict[str, str] = {}
    for i in range(files):
        rel = f"{places[i % len(places)]}f{i:05}.bin"
        data = rng.randbytes(rng.randint(size // 2, size + size // 2))
        (root / rel).write_bytes(data)
        want[rel] = hashlib.sha256(data).hexdigest()
    return want


def hash_tree(root: Path) -> dict[str, str]:
    got: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            got[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--size", type=int, default=1024, help="mean file size in bytes")
    ap.add_argument("--dirs", type=int, default=10, help="top-level directories (each with 3 below)")
    ap.add_argument("-j", type=int, default=4, help="pfs cp -j (transfers in flight)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    with running_server() as (srv, work):
        assert srv.proc is not None
        tree = work / "tree"
        want = make_tree(tree, args.files, args.size, args.dirs, random.Random(args.seed))
        total = sum((tree / rel).stat().st_size for rel in want)
        ndirs = sum(1 for _ in tree.rglob("*") if _.is_dir())

        sync()
        with RssSampler(srv.proc.pid) as s_up:
            up = cli(srv, "pfs", "cp", "-r", "-q", "-j", str(args.j), str(tree), "pfs:tree").check()
        up_sum = parse_summary(up.stderr)
        assert up_sum.files == args.files, up.stderr

        out = work / "out"
        sync()
        with RssSampler(srv.proc.pid) as s_down:
            down = cli(srv, "pfs", "cp", "-r", "-q", "-j", str(args.j), "pfs:tree", str(out)).check()
        down_sum = parse_summary(down.stderr)
        assert down_sum.files == args.files, down.stderr

        t0 = time.perf_counter()
        got = hash_tree(out)
        t_verify = time.perf_counter() - t0
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        differ = sorted(rel for rel in set(want) & set(got) if want[rel] != got[rel])
        if missing or extra or differ:
            raise SystemExit(f"download differs: {len(missing)} missing {missing[:5]}, {len(extra)} extra "
                             f"{extra[:5]}, {len(differ)} with other bytes {differ[:5]}")  # fmt: skip
        listing = json.loads(cli(srv, "pfs", "ls", "-r", "-o", "json", "pfs:tree").check().stdout)
        items = listing["items"] if isinstance(listing, dict) else listing
        remote_files = sum(1 for e in items if e["type"] == "file")

    n = args.files
    print(f"pfs cp -r of {n} files ({total / MiB:.1f} MiB, {args.size // 2}..{args.size * 3 // 2} B each, "
          f"{ndirs} dirs), -j {args.j}, real server on loopback; wall time of the whole command")  # fmt: skip
    for name, r, s in (("upload  ", up, s_up), ("download", down, s_down)):
        print(f"  {name} {r.wall:6.2f} s  {n / r.wall:6.0f} files/s  {total / MiB / r.wall:5.2f} MiB/s   "
              f"(client peak RSS {r.maxrss_kib / 1024:.0f} MiB, server peak VmRSS "
              f"{s.max_kib / 1024:.0f} MiB)")  # fmt: skip
    print(f"  all {n} files byte-identical after the round trip (sha256 each; verify took {t_verify:.2f} s); "
          f"`pfs ls -r` lists {remote_files} files under pfs:tree")  # fmt: skip


if __name__ == "__main__":
    main()
