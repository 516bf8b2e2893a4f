"""The host's GPU driver for workers in an image (``backends/local/gpu_driver.py``): which libraries
the linker cache names, how they are bound, and the workers' library path. No GPU here: this is
what can be checked without one (docs/images.md says what is on paper)."""

from __future__ import annotations

from pathlib import Path

from paddlecloud.backends.local.gpu_driver import DRIVER_DIR, driver_binds, driver_files
from paddlecloud.backends.local.image_prep import image_worker_env

__all__: list[str] = []


def _cache(lib: Path) -> str:
    return "\n".join([
        "1234 libs found in cache `/etc/ld.so.cache'",
        f"\tlibcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1",
        "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1",  # 32-bit: not for us
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {lib}/libnvidia-ml.so.1",
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {lib}/other/libnvidia-ml.so.1",  # the linker takes the first
        f"\tlibz.so.1 (libc6,x86-64) => {lib}/libz.so.1",  # not the driver's
        f"\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => {lib}/gone.so",  # named, but missing
        "garbage line",
    ])  # fmt: skip


def test_the_driver_libraries_the_linker_cache_names_are_found(tmp_path: Path) -> None:
    found = driver_files(_cache(tmp_path))
    assert found == [
        ("libcuda.so.1", tmp_path / "libcuda.so.1"),
        ("libnvidia-ml.so.1", tmp_path / "libnvidia-ml.so.1"),
        ("libnvidia-ptxjitcompiler.so.1", tmp_path / "gone.so"),
    ]


def test_each_present_library_is_bound_read_only_under_the_driver_folder(tmp_path: Path) -> None:
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        (tmp_path / name).write_bytes(b"\x7fELF")
    args = driver_binds(_cache(tmp_path))
    assert args[:6] == [
        "--ro-bind", str(tmp_path / "libcuda.so.1"), f"{DRIVER_DIR}/lib/libcuda.so.1",
        "--ro-bind", str(tmp_path / "libnvidia-ml.so.1"), f"{DRIVER_DIR}/lib/libnvidia-ml.so.1",
    ]  # fmt: skip
    assert "gone.so" not in " ".join(args) and "libz" not in " ".join(args)
    assert driver_binds("") == []  # a host without the driver: nothing, not even nvidia-smi


def test_a_worker_in_an_image_finds_the_driver_after_the_images_own_libraries() -> None:
    base = {"PATH": "/x", "VIRTUAL_ENV": "/env", "LD_LIBRARY_PATH": "/host/only/lib"}
    env = image_worker_env(base, ("LD_LIBRARY_PATH=/usr/local/cuda/lib64", "PATH=/usr/bin"))
    assert env["LD_LIBRARY_PATH"] == f"/usr/local/cuda/lib64:{DRIVER_DIR}/lib"  # not the host's folder
    assert env["PATH"] == "/env/bin:/usr/bin"
