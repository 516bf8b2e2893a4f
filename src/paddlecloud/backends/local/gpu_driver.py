"""The host's NVIDIA driver, for GPU workers that run in a container image.

An image carries CUDA's toolkit libraries (libcudart, cuDNN, NCCL) but never the driver's own
user-space libraries: those must match the host's kernel module, so container runtimes bind them in
from the host (nvidia-container-cli, for the ``compute`` and ``utility`` capabilities). A sandbox in
an image does the same:

    Sandbox (gpus) ──driver_binds(ldconfig -p)──▶ each driver library the host's linker cache
        names, bound read-only at /run/paddlecloud/driver/lib/NAME (the sandbox's own tmpfs: never
        in the shared unpacked image), nvidia-smi at /run/paddlecloud/driver/bin/nvidia-smi
    image_worker_env ──▶ LD_LIBRARY_PATH ends with /run/paddlecloud/driver/lib (after the image's
        own: an image that brings a compat libcuda keeps it first)

The device nodes are bound as for every GPU sandbox (``sandbox._kernel_args``). What is verified
here: the parsing of the linker cache and the binds made from it (no GPU on the test machines);
that a CUDA program in an image then finds the driver is on paper, as container runtimes do it.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["DRIVER_DIR", "DRIVER_LIBS", "driver_binds", "driver_files"]

#: where a sandbox in an image sees the host's driver
DRIVER_DIR = "/run/paddlecloud/driver"
#: the driver's user-space libraries (nvidia-container-cli's compute + utility sets), by soname stem
DRIVER_LIBS = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-cfg.so", "libnvidia-gpucomp.so", "libnvidia-opencl.so",
)  # fmt: skip
#: the driver's tools a worker may run
DRIVER_BINS = ("nvidia-smi",)
#: one line of ``ldconfig -p``: "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
_LINE = re.compile(r"^\s*(\S+) \(([^)]*)\) => (/\S+)$")


def driver_files(ldconfig: str) -> list[tuple[str, Path]]:
    """(soname, path) of each driver library ``ldconfig -p`` names, 64-bit only, first one per
    soname (the linker's choice)."""
    out: dict[str, Path] = {}
    for line in ldconfig.splitlines():
        m = _LINE.match(line)
        if not m or ("x86-64" not in m.group(2) and "AArch64" not in m.group(2)):
            continue
        name = m.group(1)
        if any(name.startswith(stem) for stem in DRIVER_LIBS):
            out.setdefault(name, Path(m.group(3)))
    return sorted(out.items())


@functools.lru_cache(maxsize=1)
def _ldconfig() -> str:
    """The host's linker cache, asked once (a driver upgrade needs a server restart anyway)."""
    tool = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        return subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def driver_binds(ldconfig: str | None = None) -> list[str]:
    """bwrap arguments binding the host's driver libraries and tools under ``DRIVER_DIR`` (nothing
    where the host has no NVIDIA driver); ``ldconfig``: ``ldconfig -p``'s output (None: ask it)."""
    args: list[str] = []
    for name, path in driver_files(_ldconfig() if ldconfig is None else ldconfig):
        if path.exists():
            args += ["--ro-bind", str(path), f"{DRIVER_DIR}/lib/{name}"]
    for tool in DRIVER_BINS:
        found = shutil.which(tool)
        if found and args:
            args += ["--ro-bind", found, f"{DRIVER_DIR}/bin/{tool}"]
    return args
