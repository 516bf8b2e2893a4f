"""Benchmark: the local PFS store's per-operation cost on small files, this tree against a baseline.

``LocalDirStore`` walks every key from a descriptor of its root, one ``openat`` per directory
(``storage/local.py``); this measures what that costs next to another revision of the same module
(``--baseline main``: loaded from ``git show``), in the same process, on the same files, the two
alternating round by round so that the machine's load falls on both alike. Per operation: the median
over the rounds of the mean time per call, and the ``os`` calls the store makes per call (counted by
standing a counter in for ``os`` in the store's module; about one system call each).

    .venv/bin/python bench/pfs_store_ops.py [--baseline main] [--files 1000] [--rounds 15] [--depth 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import paddlecloud.storage.local as current  # noqa: E402

MODULE = "src/paddlecloud/storage/local.py"


def load_revision(rev: str, tmp: Path) -> ModuleType:
    """``storage/local.py`` as it is at git revision ``rev``, imported under another name."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"], capture_output=True, text=True, check=True
    ).stdout
    path = tmp / f"local_{rev.replace('/', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"pfs_store_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountingOs:
    """Stands for ``os`` in a store module and counts the calls made through it."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if not callable(real) or isinstance(real, type):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        return call


def operations(store: Any, keys: list[tuple[str, ...]]) -> dict[str, Callable[[int], object]]:
    """Operation name -> one call of it on the i-th small file (or its directory)."""
    folder = keys[0][:-1]

    def read_fd(i: int) -> None:
        os.close(store.open_read(keys[i]))

    return {
        "stat": lambda i: store.stat(keys[i]),
        "read 4 KiB": lambda i: b"".join(store.read(keys[i], 0, None, 1 << 20)),
        "open_read": read_fd,
        "stat missing": lambda i: store.stat((*folder, f"missing-{i}")),
        # one listing per 10 calls (the time is scaled back to one listing)
        f"listdir ({len(keys)})": lambda i: (
            list(store.listdir(folder, recursive=False)) if i % 10 == 0 else None
        ),
    }


def fill(root: Path, module: ModuleType, n: int, depth: int) -> tuple[Any, list[tuple[str, ...]]]:
    store = module.LocalDirStore(root)
    folder = ("home", "alice", *(f"d{i}" for i in range(depth - 2)))
    store.mkdir(folder, parents=True)
    data = os.urandom(4096)
    keys = [(*folder, f"f{i:05d}") for i in range(n)]
    for key in keys:
        store.put_small(key, [data], overwrite=False)
    return store, keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="a git revision whose storage/local.py to compare against (e.g. main)")
    ap.add_argument("--files", type=int, default=1000, help="4 KiB files, each operation runs once per file")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument(
        "--depth", type=int, default=4, help="components of the files' folder key (home/alice/...)"
    )
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        modules: dict[str, ModuleType] = {"this tree": current}
        if args.baseline:
            modules[f"baseline {args.baseline}"] = load_revision(args.baseline, tmp)
        stores = {
            name: fill(tmp / f"store{j}", m, args.files, args.depth)
            for j, (name, m) in enumerate(modules.items())
        }
        op_names = list(operations(*next(iter(stores.values()))))
        times: dict[tuple[str, str], list[float]] = {(n, op): [] for n in stores for op in op_names}
        calls: dict[tuple[str, str], float] = {}
        for name, (store, keys) in stores.items():  # os calls per operation, and a warm-up
            counter, module = CountingOs(), modules[name]
            for op, fn in operations(store, keys).items():
                module.os = counter
                counter.calls = 0
                fn(0)
                calls[(name, op)] = counter.calls
                module.os = os
                for i in range(args.files):
                    fn(i)
        for _ in range(args.rounds):
            for op in op_names:
                for name, (store, keys) in stores.items():
                    fn = operations(store, keys)[op]
                    t0 = time.perf_counter()
                    for i in range(args.files):
                        fn(i)
                    per = (time.perf_counter() - t0) / args.files
                    times[(name, op)].append(per * (10 if op.startswith("listdir") else 1))

        key_len = 2 + (args.depth - 2) + 1
        print(f"{args.files} files of 4 KiB, keys of {key_len} components; median of {args.rounds} rounds")
        print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
        print(f"{'operation':<22}" + "".join(f"{name:>30}" for name in stores))
        for op in op_names:
            row = f"{op:<22}"
            for name in stores:
                med = statistics.median(times[(name, op)]) * 1e6
                row += f"{med:>14.1f} µs {calls[(name, op)]:>4} os calls"
            if args.baseline:
                a, b = (statistics.median(times[(n, op)]) for n in stores)
                row += f"   {a / b:5.2f} x"
            print(row)


if __name__ == "__main__":
    main()
