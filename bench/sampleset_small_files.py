"""Small-file read speed through a warmed SampleSet node mount vs the local disk (the engine alone).

    .venv/bin/python bench/sampleset_small_files.py [--files 20000] [--size 4096]

Makes FILES files of SIZE bytes on the local disk, syncs them into a JuiceFS volume
(``storage.juicefs``), mounts it read-only as a node would (the engine's options), warms the node's
cache, then reads every file once (open, read, close; one thread, like a data loader without
workers) from the local disk and twice through the mount (epoch 1: the kernel's metadata caches
cold; epoch 2: warm). Prints files/s and the ratio to the local disk. Both sides read from the page
cache as far as the kernel keeps it; nothing is dropped (other users share this machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from paddlecloud.storage.juicefs import Volume


def read_all(root: Path) -> tuple[int, float]:
    started = time.perf_counter()
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                f.read()
            n += 1
    return n, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    vol = Volume(base / "vol", "bench")
    node, admin = vol.root / "node" / "mnt", vol.root / "admin"
    try:
        src = base / "src"
        for i in range(args.files):
            d = src / f"d{i // 1000:03d}"
            if i % 1000 == 0:
                d.mkdir(parents=True)
            (d / f"{i:06d}.bin").write_bytes(os.urandom(args.size))
        vol.format()
        vol.mount(admin, vol.root / "admin-cache", 0, read_only=False)
        t = time.perf_counter()
        vol.sync(src, admin, lambda d, n: None)
        print(f"sync {args.files} files: {time.perf_counter() - t:.1f} s")
        vol.mount(
            node,
            vol.root / "node" / "cache",
            4 * args.files * max(args.size, 4096) + (64 << 20),
            read_only=True,
        )
        t = time.perf_counter()
        vol.warmup(node, "", lambda d, n: None)
        print(f"warmup: {time.perf_counter() - t:.1f} s")
        n, local = read_all(src)
        print(f"local disk:       {n} files in {local:.2f} s = {n / local:,.0f} files/s")
        for epoch in (1, 2):
            n, took = read_all(node)
            print(f"SampleSet epoch {epoch}: {n} files in {took:.2f} s = {n / took:,.0f} files/s "
                  f"({local / took:.2f} x local disk)")  # fmt: skip
    finally:
        for mp in (node, admin):
            vol.umount(mp)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
