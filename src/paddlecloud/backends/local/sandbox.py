"""Confine each worker process of the local backend to what its job may see (bubblewrap).

    LocalBackend ──Sandbox(isolation, shim, gpus)──▶ Sandbox.jail(JobLaunch, env dir) ──▶ JobJail
    WorkerProc.spawn ──JobJail.wrap(WorkerDirs, launcher argv)──▶ Command(argv, fds) ──▶ Popen
    EnvCache._build ──Sandbox.build(target, tmp, pip argv)──────▶ Command(argv, fds) ──▶ run

A sandboxed worker is one ``bwrap`` process tree in namespaces of its own::

    env --ignore-signal=TERM,INT bwrap --unshare-user --uid 1000 --disable-userns --unshare-pid
        --unshare-ipc --unshare-uts --cap-drop ALL --hostname WORKER-TAG --proc /proc --dev /dev
        --bind TMP /tmp --ro-bind /usr ... (the system, selected /etc files, generated passwd, group
        and hosts, the base Python, the job's environment, the runtime shim, the job's contract/)
        --bind-fd HOME  --ro-bind-fd PUBLIC  [--ro-bind-fd INPUT] [--bind-fd OUTPUT]
        --bind CWD --bind STATUS_DIR [--ro-bind SAMPLESET_MOUNT] --remount-ro / --chdir CWD
        -- ENV/bin/python -m paddlecloud.runtime.launcher --status STATUS_DIR/exit.json --cwd CWD ENTRY

Nothing else of the host exists inside: not the data dir (database, logs, pid files, other jobs),
not other users' homes, not the server's home (its client config holds the admin's token), not the
processes of other jobs (``/proc`` is the sandbox's own). Paths keep their host names, so the env
contract (``PADDLECLOUD_OUTPUT_DIR``, ...) is the same with and without the sandbox.

Signals and lifetime: the outer ``bwrap`` is the process the backend knows (pid file, process
group). It ignores SIGTERM and SIGINT, so a graceful stop sent to the process group reaches the
launcher inside (which passes it to the program) and the outer process lives exactly as long as the
launcher and exits with its code. SIGKILL to the group kills the outer process and the namespace's
init, and with it every process of the sandbox. The run tag stays in every process's environment, so
the backend's ``/proc`` scan (run as the server's user, outside) still finds them. Each run has a
host name of its own (on loopback in its /etc/hosts): programs that tell processes apart by host
name and pid would otherwise see one process (every sandbox's launcher has the same pid).

User data is bound by file descriptor: each PFS path is opened from ``/`` without following any
symbolic link (``O_PATH | O_NOFOLLOW``) and passed as ``--bind-fd``, so a link a job plants in its
home (``output -> /``) can never widen what a later job sees. Platform-owned paths (the system, the
job's run directories, which jobs cannot replace) are bound by name.

Environment builds run pip in the same kind of sandbox (a requirement may be a source package whose
build runs arbitrary code): the system, the server's Python and pip, pip's configuration and the local
indexes it names, the new environment (read-write) and a private /tmp; nothing else.
"""

from __future__ import annotations

import configparser
import contextlib
import errno
import glob
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import unquote, urlparse

from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.local.gpu_driver import driver_binds
from paddlecloud.backends.options import ISOLATION_MODES

if TYPE_CHECKING:  # only a type here: the Slurm node-side jail imports this module, and no more
    from paddlecloud.backends.base import JobLaunch

__all__ = [
    "API_SOCKET",
    "IMAGE_PIP",
    "ISOLATION_MODES",
    "SANDBOX_UID",
    "Command",
    "ConfinementError",
    "ImageRoot",
    "Isolation",
    "JobJail",
    "Sandbox",
    "WorkerDirs",
    "choose",
    "make_dirs",
    "open_file_nofollow",
    "open_nofollow",
    "pip_runner",
    "read_status",
    "worker_base_env",
]

#: the uid and gid a sandboxed worker runs as (mapped to the server's user outside)
SANDBOX_UID = 1000
#: where a sandboxed worker finds the run's API socket (``PADDLECLOUD_API_SOCKET``)
API_SOCKET = "/run/paddlecloud/api.sock"
#: where a build in an image sees the platform's pip package (``Sandbox.build``)
IMAGE_PIP = "/run/paddlecloud/pip/pip"
#: what ``PATH`` holds after the job's environment inside a sandbox
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the files and folders of /etc that programs read (libc, DNS, TLS, time zone, alternatives):
#: nothing else of /etc (keys, service configuration) exists inside
ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf", "resolv.conf",
    "gai.conf", "localtime", "timezone", "protocols", "services", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates", "ca-certificates.conf", "pki/tls/certs", "pki/tls/openssl.cnf", "pki/ca-trust",
    "crypto-policies", "alternatives", "mime.types", "os-release", "debian_version", "pip.conf",
    "xdg/pip",
)  # fmt: skip
#: what of /proc and /sys a sandbox must not write or read, as a container runtime masks them (the
#: sandbox's uid is the server's outside, root where the server is root: without capabilities, but
#: the owner of these files): /proc/sys read-only (sysctls such as kernel.core_pattern are the
#: host's), these files replaced by /dev/null, these folders by an empty read-only tmpfs
PROC_READ_ONLY = ("/proc/sys",)
PROC_MASKED_FILES = (
    "/proc/sysrq-trigger", "/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list",
    "/proc/sched_debug", "/proc/latency_stats", "/proc/kallsyms", "/proc/kmsg",
)  # fmt: skip
PROC_MASKED_DIRS = ("/proc/acpi", "/proc/scsi", "/sys/firmware")
#: server variables every worker gets (when set), besides those of the env contract
PASS_ENV = (
    "LANG", "LANGUAGE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "LD_LIBRARY_PATH",
)  # fmt: skip
#: ... and unsandboxed workers also these (they name the server's own places)
PASS_ENV_UNCONFINED = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR")
#: what an environment build (pip) gets besides PASS_ENV: pip's settings and proxies
BUILD_ENV_PREFIXES = ("PIP_", "LC_")
BUILD_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: what of an image's root a sandbox running in it sees (read-only), besides /etc
IMAGE_ROOT = ("usr", "opt", *_MERGED_USR)
#: an image's folders bound entry by entry in a folder of the sandbox's own: /etc, where the
#: platform's files go beside the image's, and /opt, where a data dir or pip's wheels of the
#: server's host may lie (a mount point cannot be made inside a read-only bind of the image's)
_BY_ENTRY = ("opt", "etc")
#: the /etc files a sandbox gets from the platform, never from an image
_PLATFORM_ETC = frozenset({"passwd", "group", "hosts", "resolv.conf"})
_PIP_PATH_KEYS = ("find-links", "index-url", "extra-index-url", "cert", "client-cert", "constraint")
_STATUS_MAX = 64 * 1024


class ConfinementError(RuntimeError):
    """A path a job would see cannot be bound safely (a symbolic link, a missing folder, ...)."""


@dataclass(frozen=True)
class Isolation:
    """What the backend runs workers with, and why (``paddlecloud up`` prints it)."""

    mode: str  # "sandbox" | "none"
    detail: str

    @property
    def sandboxed(self) -> bool:
        return self.mode == "sandbox"

    def __str__(self) -> str:
        return f"{self.mode} ({self.detail})"


@dataclass(frozen=True)
class Command:
    """What to run: ``argv`` and the file descriptors it inherits (``Popen(pass_fds=...)``)."""

    argv: list[str]
    fds: tuple[int, ...] = ()


@dataclass(frozen=True)
class ImageRoot:
    """What a sandbox needs of an unpacked image: its root file system and the python3 in it (a path
    inside the image) that runs the platform's launcher."""

    rootfs: Path
    python: str


@dataclass(frozen=True)
class WorkerDirs:
    """A worker's own folders: its copy of the package (cwd), where the launcher writes its exit
    status, and what it sees as /tmp (all three the platform's: a job cannot replace them); and its
    host name inside, unique per run: torch's elastic agents tell nodes apart by (host name, pid),
    and in pid namespaces of their own every agent has the same pid. ``address`` is what that name
    resolves to inside (loopback on one machine; a Slurm node's own address, so that programs that
    find their address from their host name still tell it to workers on other nodes)."""

    cwd: Path
    status: Path
    tmp: Path
    hostname: str = "paddlecloud"
    address: str = "127.0.0.1"
    #: the mount of the job's SampleSet on the worker's node, bound read-only at its own path
    #: (``PADDLECLOUD_SAMPLESET_DIR``); a platform mount, so bound by name
    sampleset: Path | None = None
    #: the run's API socket (its monitor relays it to the API: ``node.apirelay``), bound at
    #: ``API_SOCKET`` inside; None: the worker reaches the API's URL directly
    api_socket: Path | None = None


# -- paths reached without following links ---------------------------------------------------------


def _parts(path: Path) -> tuple[str, ...]:
    if not path.is_absolute() or ".." in path.parts:
        raise ConfinementError(f"{path}: not an absolute, normalised path")
    return path.parts[1:]


def _walk(path: Path, *, create: bool, directory: bool) -> int:
    """An ``O_PATH`` descriptor of ``path`` reached from ``/`` without following any symbolic link;
    with ``create``, missing folders are made on the way (mode 0755)."""
    parts = _parts(path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_PATH | os.O_NOFOLLOW | (os.O_DIRECTORY if directory or not last else 0)
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    where = "/" + "/".join(parts[: i + 1])
                    raise ConfinementError(f"{path}: {where} does not exist") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    where = "/" + "/".join(parts[: i + 1])
                    raise ConfinementError(f"{path}: {where} is a symbolic link or not a folder") from None
                raise ConfinementError(f"{path}: {exc.strerror}") from None
            os.close(fd)
            fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise ConfinementError(f"{path} is a symbolic link")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_nofollow(path: Path, *, directory: bool = True) -> int:
    """``path`` as an ``O_PATH`` descriptor, every component reached without following a link
    (ConfinementError when one is a link or missing). The caller closes it."""
    return _walk(path, create=False, directory=directory)


def open_file_nofollow(path: Path) -> BinaryIO:
    """``path`` opened for reading, every component reached without following a link; only a
    regular file (a job may have planted a link or a FIFO in its owner's home)."""
    parent = _walk(path.parent, create=False, directory=True)
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        raise ConfinementError(f"{path}: {exc.strerror}") from None
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfinementError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def make_dirs(path: Path) -> None:
    """``mkdir -p path`` that never goes through a symbolic link (ConfinementError if it would)."""
    os.close(_walk(path, create=True, directory=True))


def _under(path: Path, root: Path | None) -> bool:
    return root is not None and (path == root or root in path.parents)


# -- the environment a worker starts with ----------------------------------------------------------


def worker_base_env(
    environ: Mapping[str, str], extra: Sequence[str], *, sandboxed: bool, env_dir: Path, shim: Path, user: str
) -> dict[str, str]:
    """A worker's environment before the env contract: built from a whitelist of the server's
    variables (``PASS_ENV`` and the operator's ``extra`` names), never the whole server environment,
    which may hold secrets (a database URL, cloud credentials)."""
    names = set(PASS_ENV) | set(extra) | (set() if sandboxed else set(PASS_ENV_UNCONFINED))
    env = {k: v for k, v in environ.items() if k in names or k.startswith("LC_")}
    system_path = SYSTEM_PATH if sandboxed else environ.get("PATH", SYSTEM_PATH)
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{system_path}"
    env["VIRTUAL_ENV"] = str(env_dir)
    env["PYTHONPATH"] = str(shim)
    if sandboxed:
        env.update(HOME="/tmp", USER=user, LOGNAME=user)
    return env


def _build_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in environ.items()
        if k in PASS_ENV or k in BUILD_ENV or k.startswith(BUILD_ENV_PREFIXES)
    }
    env.update(PATH=SYSTEM_PATH, HOME="/tmp", USER="paddlecloud", LOGNAME="paddlecloud")
    return env


# -- pip's configuration, for environment builds -----------------------------------------------------


def _pip_config(environ: Mapping[str, str]) -> tuple[list[Path], dict[str, str]]:
    """pip's configuration files (to bind) and the variables that make pip read them inside the
    sandbox, where ``HOME`` is another folder: the user's file becomes ``PIP_CONFIG_FILE``."""
    files = [Path("/etc/pip.conf")]
    dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files += [Path(d) / "pip" / "pip.conf" for d in dirs if d]
    env: dict[str, str] = {}
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    else:
        home = Path(environ.get("HOME") or Path.home())
        xdg = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        user = [p for p in (xdg / "pip" / "pip.conf", home / ".pip" / "pip.conf") if p.is_file()]
        if user:
            files.append(user[0])
            env["PIP_CONFIG_FILE"] = str(user[0])
    return [f for f in files if f.is_file()], env


def _local_places(value: str, index: bool) -> list[Path]:
    """Local paths named by one pip setting (``file:`` URLs or absolute paths); a local index also
    needs its parent, where simple indexes keep the files they link to."""
    out = []
    for item in value.split():
        path = Path(unquote(urlparse(item).path)) if item.startswith("file:") else Path(item)
        if path.is_absolute() and path.exists():
            out.append(path.parent if index and path.is_dir() else path)
    return out


def _pip_places(files: list[Path], environ: Mapping[str, str]) -> list[Path]:
    settings: list[tuple[str, str]] = []
    for f in files:
        parser = configparser.RawConfigParser()
        with contextlib.suppress(configparser.Error, OSError, UnicodeDecodeError):
            parser.read(f, encoding="utf-8")
        for section in parser.sections():
            settings += [(k, v) for k, v in parser.items(section) if k in _PIP_PATH_KEYS]
    for key in _PIP_PATH_KEYS:
        var = "PIP_" + key.upper().replace("-", "_")
        if environ.get(var):
            settings.append((key, environ[var]))
    places: list[Path] = []
    for key, value in settings:
        places += _local_places(value, index=key.endswith("index-url"))
    return places


# -- the sandbox ---------------------------------------------------------------------------------


def pip_runner() -> Path:
    """The platform's pip as a script any Python 3 runs (pip's ``__pip-runner__.py``: what ``pip
    --python`` starts), for environments made in an image by the image's Python."""
    spec = importlib.util.find_spec("pip")
    if spec is None or spec.origin is None:
        raise IsolationError("pip is not installed beside the platform")
    return Path(spec.origin).parent / "__pip-runner__.py"


def _system_args(gpus: bool) -> list[str]:
    """The read-only system every sandbox sees (binds by name: these are not the users')."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _MERGED_USR:
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for name in ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args + _kernel_args(gpus)


def _entry_args(src: Path, dst: str) -> list[str]:
    """``src`` of an image at ``dst``: a link made anew inside (never followed on the host), a
    folder or file bound read-only."""
    if src.is_symlink():
        return ["--symlink", os.readlink(src), dst]
    if src.is_dir() or src.is_file():
        return ["--ro-bind", str(src), dst]
    return []


def image_system_args(rootfs: Path, gpus: bool) -> list[str]:
    """The read-only system of a sandbox that runs in an image (``backends.images``): the image's
    system folders (``IMAGE_ROOT``) in their places, its /etc and /opt entry by entry in folders of
    the sandbox's own (so the generated passwd, group and hosts and the host's resolv.conf go in
    beside them, and the platform's places under /opt get mount points), and the kernel's parts as
    for every sandbox. The rest of the image's root (var, home,
    root, srv, ...) is not bound: the root stays bubblewrap's, where the platform's places (the
    data dir's folders, PFS) get their mount points, never in the shared unpacked image."""
    args: list[str] = []
    for name in IMAGE_ROOT:
        if name not in _BY_ENTRY:
            args += _entry_args(rootfs / name, f"/{name}")
    for name in _BY_ENTRY:
        top = rootfs / name
        if top.is_symlink():  # (an image whose /opt is a link: as it is, nothing can go beside it)
            args += _entry_args(top, f"/{name}")
            continue
        args += ["--dir", f"/{name}"]
        for entry in sorted(top.iterdir()) if top.is_dir() else ():
            if not (name == "etc" and entry.name in _PLATFORM_ETC):
                args += _entry_args(entry, f"/{name}/{entry.name}")
    args += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    if gpus:  # the host's driver libraries, as container runtimes bind them (``gpu_driver.py``)
        args += driver_binds()
    return args + _kernel_args(gpus)


def _kernel_args(gpus: bool) -> list[str]:
    """/sys read-only, /proc's dangerous parts masked, the GPUs' device nodes."""
    args = ["--ro-bind-try", "/sys", "/sys"]
    for path in PROC_READ_ONLY:  # after --proc (``_base``): over the sandbox's own /proc
        args += ["--ro-bind", path, path]
    for path in PROC_MASKED_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in PROC_MASKED_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
    if gpus:  # the NVIDIA (and DRM) device nodes; which GPUs a trainer uses is CUDA_VISIBLE_DEVICES
        for dev in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri")):
            args += ["--dev-bind", dev, dev]
    return args


def _identity(user: str) -> tuple[bytes, bytes]:
    """/etc/passwd and /etc/group of the sandbox: the job's user as ``SANDBOX_UID`` (programs that
    look up their own user name find one), and nobody for files of other owners."""
    u = SANDBOX_UID
    passwd = f"{user}:x:{u}:{u}:PaddleCloud job:/tmp:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\n"
    group = f"{user}:x:{u}:\nnogroup:x:65534:\n"
    return passwd.encode(), group.encode()


def _hosts(hostname: str, address: str) -> bytes:
    """The host's /etc/hosts with the sandbox's own host name at ``address`` (programs resolve their
    host name to find their address: gloo, Paddle)."""
    try:
        host = Path("/etc/hosts").read_text()
    except OSError:
        host = "127.0.0.1\tlocalhost\n::1\tlocalhost\n"
    return f"{host.rstrip()}\n{address}\t{hostname}\n".encode()


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _status_of(result: subprocess.CompletedProcess[bytes]) -> str:
    text = (result.stderr or b"").decode(errors="replace").strip().splitlines()
    return text[-1] if text else f"exit status {result.returncode}"


class Sandbox:
    """bubblewrap with this machine's system profile; ``jail()`` makes one job's confinement."""

    def __init__(self, shim: Path, *, gpus: bool, private: Sequence[Path] = ()) -> None:
        self.bwrap = shutil.which("bwrap") or "bwrap"
        self.shim = shim
        self.gpus = gpus
        self.userns = True
        self._system = _system_args(gpus)
        self._python = [Path(sys.base_prefix)] if not _under(Path(sys.base_prefix), Path("/usr")) else []
        for place in private:  # the data dir must not be inside anything every job sees
            for shared in (Path("/usr"), Path("/etc"), Path("/sys"), *self._python, Path(sys.prefix)):
                if _under(place.resolve(), shared):
                    raise IsolationError(
                        f"{place} lies under {shared}, which every job sees read-only: choose a data "
                        "dir elsewhere (up --data-dir)"
                    )

    # -- probing ---------------------------------------------------------------------------

    def probe(self) -> str | None:
        """None when a sandbox starts here; else why not. Tries a user namespace (the job runs as
        uid 1000) and, for a server running as root, plain namespaces (uid 0 without capabilities)."""
        if shutil.which("bwrap") is None:
            return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
        problem = ""
        for userns in (True, False) if os.geteuid() == 0 else (True,):
            self.userns = userns
            argv = self._head() + self._system + ["--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
            try:
                r = subprocess.run(argv, capture_output=True, timeout=30, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"bwrap did not run: {exc}"
            if r.returncode == 0:
                return None
            problem = _status_of(r)
        return f"bwrap cannot start a sandbox here: {problem}"

    def version(self) -> str:
        try:
            out = subprocess.run([self.bwrap, "--version"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "bubblewrap"
        return out.stdout.strip() or "bubblewrap"

    def describe(self) -> str:
        who = f"uid {SANDBOX_UID} in a user namespace" if self.userns else "uid 0 without capabilities"
        return (
            f"{self.version()}: each worker in its own mount, pid, ipc and uts namespaces as {who}; it sees "
            "the system, its job's environment, its owner's PFS home (read-write), public (read-only), "
            "its input and output, and nothing of the data dir"
        )

    # -- commands ---------------------------------------------------------------------------

    def _head(self) -> list[str]:
        """Namespaces and privileges (the outer process ignores SIGTERM/SIGINT: see the module doc)."""
        head = ["/usr/bin/env", "--ignore-signal=TERM,INT", self.bwrap]
        if self.userns:
            uid = str(SANDBOX_UID)
            head += ["--unshare-user", "--uid", uid, "--gid", uid, "--disable-userns"]
        return [*head, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL"]

    def _base(self, tmp: Path, identity: list[int], hostname: str, rootfs: Path | None) -> list[str]:
        """Namespaces, /proc, /dev, a private /tmp (first: data dirs may lie under the host's /tmp),
        the system (the host's, or ``rootfs``: an image's), /etc/passwd, /etc/group and /etc/hosts
        (from ``identity``), the base Python (not in an image: the image's own runs the launcher)."""
        args = [*self._head(), "--hostname", hostname, "--proc", "/proc", "--dev", "/dev"]
        system = self._system if rootfs is None else image_system_args(rootfs, self.gpus)
        args += ["--bind", str(tmp), "/tmp", "--symlink", "/tmp", "/var/tmp", *system]
        for fd, name in zip(identity, ("passwd", "group", "hosts"), strict=True):
            args += ["--ro-bind-data", str(fd), f"/etc/{name}"]
        for p in self._python if rootfs is None else []:
            args += ["--ro-bind", str(p), str(p)]
        return args

    @contextlib.contextmanager
    def _command(self, user: str, dirs: WorkerDirs, binds: list[str], fd_binds: list[tuple[str, Path, bool]],
                 argv: list[str], rootfs: Path | None = None) -> Iterator[Command]:  # fmt: skip
        """``argv`` in a sandbox: the base, ``binds`` (by name), ``fd_binds`` (opened without
        following links: (option, path, is a folder)); descriptors closed once the caller is done."""
        shutil.rmtree(dirs.tmp, ignore_errors=True)  # a fresh /tmp for every run
        dirs.tmp.mkdir(parents=True)
        passwd, group = _identity(user)
        fds = [
            _memfd("passwd", passwd),
            _memfd("group", group),
            _memfd("hosts", _hosts(dirs.hostname, dirs.address)),
        ]
        try:
            args = self._base(dirs.tmp, fds[:3], dirs.hostname, rootfs)
            for option, path, is_dir in fd_binds:
                fds.append(open_nofollow(path, directory=is_dir))
                args += [option, str(fds[-1]), str(path)]
            args += [*binds, "--remount-ro", "/", "--chdir", str(dirs.cwd), "--", *argv]
            yield Command(args, tuple(fds))
        finally:
            for fd in fds:
                os.close(fd)

    def jail(
        self, launch: JobLaunch, env_dir: Path, shared: Sequence[Path] = (), image: ImageRoot | None = None
    ) -> JobJail:
        """The confinement of ``launch``'s workers (nothing is opened until a worker is wrapped);
        ``shared``: platform folders of the job its workers read (the membership file's); ``image``:
        the unpacked image they run in (its system instead of the host's, its python)."""
        home, public = launch.home_dir, launch.public_dir
        data: list[tuple[str, Path, bool]] = []
        if home is not None:
            data.append(("--bind-fd", home, True))
        if public is not None:
            data.append(("--ro-bind-fd", public, True))
        if launch.files.input_dir:
            inp = Path(launch.files.input_dir)
            if not (_under(inp, home) or _under(inp, public)):
                data.append(("--ro-bind-fd", inp, inp.is_dir()))
        if not _under(launch.output_dir, home):
            data.append(("--bind-fd", launch.output_dir, True))
        ca = (Path(launch.api.ca),) if launch.api.ca else ()  # the API's CA bundle (https), public
        return JobJail(self, launch.user, env_dir, tuple(data), (*shared, *ca), image=image)

    @contextlib.contextmanager
    def build(
        self, target: Path, tmp: Path, argv: list[str], image: ImageRoot | None = None, pip: bool = True
    ) -> Iterator[Command]:
        """pip building ``target`` (read-write) in a sandbox; see the module doc. In ``image``: the
        image's system instead of the host's, and of the platform only pip's own package (at
        ``IMAGE_PIP``: never inside the image's read-only folders); ``pip`` False: not even that, nor
        pip's configuration (the image's venv step runs the image's code, which must not read the
        server's index credentials)."""
        files, _ = _pip_config(os.environ) if pip else ([], {})
        ro = [(p, p) for p in (*files, *_pip_places(files, os.environ))]
        if image is None:
            ro.append((Path(sys.prefix), Path(sys.prefix)))
        elif pip:
            ro.append((pip_runner().parent, Path(IMAGE_PIP)))
        binds = [a for src, dst in dict.fromkeys(ro) for a in ("--ro-bind", str(src), str(dst))]
        binds += ["--bind", str(target), str(target), "--die-with-parent"]  # a killed build ends whole
        dirs = WorkerDirs(cwd=target, status=target, tmp=tmp, hostname="paddlecloud-build")
        rootfs = image.rootfs if image is not None else None
        with self._command("paddlecloud", dirs, binds, [], argv, rootfs) as cmd:
            yield cmd

    @staticmethod
    def build_env(pip: bool = True) -> dict[str, str]:
        """The environment of an environment build: pip's settings, proxies, locale; no more (no
        pip settings with ``pip`` False)."""
        if not pip:
            return {k: v for k, v in _build_env(os.environ).items() if not k.startswith("PIP_")}
        _, extra = _pip_config(os.environ)
        return {**_build_env(os.environ), **extra}


@dataclass(frozen=True)
class JobJail:
    """One job's confinement: its user, environment, PFS places (option, path, is a folder), and
    platform folders of the job it reads. ``die_with_parent``: the sandbox ends whole when the
    process that started bwrap dies, and when the launcher exits (bwrap's init otherwise lives on
    with what a job left behind): for Slurm's batch step; never locally, where the server starts
    bwrap and its workers must outlive a server restart."""

    sandbox: Sandbox
    user: str
    env_dir: Path
    data: tuple[tuple[str, Path, bool], ...] = field(default=())
    shared: tuple[Path, ...] = field(default=())
    die_with_parent: bool = False
    #: the image the workers run in (None: the host's system and the job's environment)
    image: ImageRoot | None = None

    @property
    def python(self) -> str:
        """The interpreter the launcher runs under inside: the job's environment's (in an image, a
        venv made by the image's Python: ``envs.py``)."""
        return str(self.env_dir / "bin" / "python")

    def check(self) -> None:
        """Make the user's home if it is missing and check that every PFS place can be bound
        (ConfinementError says which cannot); run before the job's first worker starts."""
        for option, path, is_dir in self.data:
            if option == "--bind-fd" and is_dir:
                make_dirs(path)
            os.close(open_nofollow(path, directory=is_dir))

    @contextlib.contextmanager
    def wrap(self, dirs: WorkerDirs, argv: list[str]) -> Iterator[Command]:
        """``argv`` (the launcher) confined to this job's places and the worker's own folders."""
        binds = ["--ro-bind", str(self.sandbox.shim), str(self.sandbox.shim)]
        binds += ["--ro-bind", str(self.env_dir), str(self.env_dir)]
        for folder in self.shared:
            binds += ["--ro-bind-try", str(folder), str(folder)]  # absent for runs of older versions
        binds += ["--bind", str(dirs.cwd), str(dirs.cwd), "--bind", str(dirs.status), str(dirs.status)]
        if dirs.sampleset is not None:
            binds += ["--ro-bind", str(dirs.sampleset), str(dirs.sampleset)]
        if dirs.api_socket is not None:
            binds += ["--ro-bind", str(dirs.api_socket), API_SOCKET]
        binds += ["--die-with-parent"] if self.die_with_parent else []
        rootfs = self.image.rootfs if self.image is not None else None
        with self.sandbox._command(self.user, dirs, binds, list(self.data), argv, rootfs) as cmd:
            yield cmd


def read_status(path: Path) -> bytes:
    """The launcher's status file, read without following a link or blocking on a FIFO (the folder
    is the job's to write in): at most 64 KiB of a regular file; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        return os.read(fd, _STATUS_MAX)
    finally:
        os.close(fd)


def choose(
    mode: str, shim: Path, *, gpus: bool, private: Sequence[Path] = ()
) -> tuple[Sandbox | None, Isolation]:
    """The sandbox for ``mode`` (auto | sandbox | none) and what to tell the operator. ``sandbox``
    raises IsolationError where bubblewrap cannot run; ``auto`` then runs unconfined and says why."""
    if mode not in ISOLATION_MODES:
        raise IsolationError(f"unknown isolation {mode!r}: choose one of {', '.join(ISOLATION_MODES)}")
    if mode == "none":
        return None, Isolation("none", "asked for with --isolation none")
    box = Sandbox(shim, gpus=gpus, private=private)
    problem = box.probe()
    if problem is None:
        return box, Isolation("sandbox", box.describe())
    if mode == "sandbox":
        raise IsolationError(
            f"--isolation sandbox: {problem}; install bubblewrap (scripts/ensure-system-packages.sh) or "
            "run with --isolation none on a machine where every user trusts every other"
        )
    return None, Isolation("none", problem)
