"""The torch side of bench/adaptive_torch.py ``--probe``: run under torchrun with an interpreter that has
torch (not the platform's venv). Two measurements per world size:

- overhead: the example's MLP, steps with ``AdaptiveDDP.step`` (measuring: the DDP hook on several
  replicas, the split step every 4th step on one) against the plain DDP step, in alternating blocks;
- accuracy of the noise estimate: ``loss_i = |theta - z_i|² / 2`` with ``z_i ~ N(mu, s² I)`` and the
  learning rate 0, so every gradient is ``theta - z_i``: ``|G|² = |theta - mu|²``, ``tr(Sigma) = d s²``,
  and the true noise scale is known.

Rank 0 prints ``overhead world W local L plain P ms adaptive A ms (+X %)`` and
``noise world W true T estimated E``.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from paddlecloud.runtime.adaptive_torch import AdaptiveDDP, Options

ADAPTIVE_ENV = {
    "PADDLECLOUD_BATCH_INIT": "32",
    "PADDLECLOUD_BATCH_MIN": "32",
    "PADDLECLOUD_BATCH_MAX": "4096",
}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def overhead(world: int, global_batch: int, blocks: int = 6, steps: int = 100) -> tuple[float, float]:
    """Mean ms per step: plain DDP, and AdaptiveDDP measuring (same model, data, batch)."""
    local = global_batch // world
    os.environ.update(ADAPTIVE_ENV, PADDLECLOUD_BATCH_SIZE=str(global_batch))
    model = DistributedDataParallel(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ada = AdaptiveDDP(model, opt, api=None)
    assert ada.local_batch == local and ada.assignment.adaptive
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(local, 8), torch.randint(0, 4, (local,))
    plain_ms: list[float] = []
    ada_ms: list[float] = []
    for block in range(blocks):
        for use in (block % 2 == 0, block % 2 == 1):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                if use:
                    ada.step([(x, y)], lambda b: loss_fn(model(b[0]), b[1]))
                else:
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
            (ada_ms if use else plain_ms).append((time.perf_counter() - t0) / steps * 1000)
    return statistics.median(plain_ms[1:]), statistics.median(ada_ms[1:])


class Quadratic(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((self.theta - z) ** 2).sum(1).mean()


def noise(world: int, global_batch: int, steps: int = 600) -> tuple[float, float]:
    """(true, estimated) noise scale of the quadratic problem."""
    dim, s = 100, 1.0
    os.environ.update(ADAPTIVE_ENV, PADDLECLOUD_BATCH_SIZE=str(global_batch))
    model = DistributedDataParallel(Quadratic(dim))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    ada = AdaptiveDDP(model, opt, api=None, options=Options(split_every=1))
    gen = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(steps):
        z = torch.randn(ada.local_batch, dim, generator=gen) * s
        ada.step([z], lambda b: model(b))
    true = dim * s**2 / (dim * 0.5**2)  # tr(Sigma) / |G|² with mu = 0, theta = 0.5
    return true, float(ada.noise_scale or 0.0)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    for batch in (32, 256):
        plain, adaptive = overhead(world, batch)
        if rank == 0:
            print(
                f"overhead world {world} local {batch // world} plain {plain:.3f} ms "
                f"adaptive {adaptive:.3f} ms ({(adaptive / plain - 1) * 100:+.1f} %)",
                flush=True,
            )
    true, est = noise(world, 64)
    if rank == 0:
        print(f"noise world {world} true {true:.1f} estimated {est:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
