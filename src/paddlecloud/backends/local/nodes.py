"""Virtual nodes of the local cluster: by default one node the size of this machine.

GPUs come from ``nvidia-smi`` when it is present; with several virtual nodes the machine's GPUs are
dealt out to them in order.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import psutil

from paddlecloud.backends.base import NodeInfo
from paddlecloud.core.resources import Resources

__all__ = ["NodeShape", "detect_gpus", "make_nodes"]


@dataclass(frozen=True)
class NodeShape:
    """``paddlecloud up --nodes N --node-cpu C --node-memory M --node-gpu G``; None: this machine."""

    count: int = 1
    cpu_m: int | None = None
    memory: int | None = None
    gpu: int | None = None


def detect_gpus() -> tuple[int, ...]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(int(line) for line in out.split() if line.strip().isdigit())


def make_nodes(shape: NodeShape) -> tuple[NodeInfo, ...]:
    cpu_m = shape.cpu_m if shape.cpu_m is not None else (os.cpu_count() or 1) * 1000
    memory = shape.memory if shape.memory is not None else int(psutil.virtual_memory().total)
    machine_gpus = detect_gpus()
    per_node_gpu = shape.gpu if shape.gpu is not None else len(machine_gpus) // max(shape.count, 1)
    nodes = []
    for i in range(shape.count):
        gpus = tuple(machine_gpus[i * per_node_gpu : (i + 1) * per_node_gpu])
        if len(gpus) < per_node_gpu:  # declared more GPUs than the machine has: virtual indices
            gpus = tuple(range(i * per_node_gpu, (i + 1) * per_node_gpu))
        nodes.append(NodeInfo(name=f"node-{i}", capacity=Resources(cpu_m, memory, len(gpus)), gpus=gpus))
    return tuple(nodes)
