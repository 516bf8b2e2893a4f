"""Resource vectors (cpu millicores, memory bytes, whole GPUs), their arithmetic and their words for
people (``shortfall``, ``describe``: memory as ``core.quantity.human_memory`` writes it)."""

from __future__ import annotations

from dataclasses import dataclass

from paddlecloud.core.quantity import format_cpu, human_memory

__all__ = ["Resources"]


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory - other.memory, self.gpu - other.gpu)

    def times(self, n: int) -> Resources:
        return Resources(self.cpu_m * n, self.memory * n, self.gpu * n)

    def cpus_in_units(self, unit_m: int) -> Resources:
        """The CPU rounded up to a multiple of ``unit_m`` millicores, at least one unit (what an
        engine allocating whole CPUs gives: Slurm's ``--cpus-per-task``); 1: unchanged."""
        if unit_m <= 1:
            return self
        return Resources(max(1, -(-self.cpu_m // unit_m)) * unit_m, self.memory, self.gpu)

    def fits_in(self, free: Resources) -> bool:
        return self.cpu_m <= free.cpu_m and self.memory <= free.memory and self.gpu <= free.gpu

    def shortfall(self, free: Resources) -> list[str]:
        """Human phrases for each dimension that does not fit, e.g. ``cpu 4 > 2 free``."""
        out = []
        if self.cpu_m > free.cpu_m:
            out.append(f"cpu {format_cpu(self.cpu_m)} > {format_cpu(max(free.cpu_m, 0))} free")
        if self.memory > free.memory:
            out.append(f"memory {human_memory(self.memory)} > {human_memory(max(free.memory, 0))} free")
        if self.gpu > free.gpu:
            out.append(f"gpu {self.gpu} > {max(free.gpu, 0)} free")
        return out

    def describe(self) -> str:
        text = f"cpu {format_cpu(self.cpu_m)}, memory {human_memory(self.memory)}"
        return text + (f", gpu {self.gpu}" if self.gpu else "")
