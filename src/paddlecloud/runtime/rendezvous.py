"""The platform-hosted rendezvous store of an elastic PyTorch job.

Run as ``python -m paddlecloud.runtime.rendezvous PORT [HOST]`` (HOST: the address to listen on,
127.0.0.1 by default; the Slurm backend, whose trainers run on other hosts, gives 0.0.0.0).

torchrun's c10d rendezvous keeps its state in a ``TCPStore``; by default the agent whose address
matches the endpoint hosts it, so losing that trainer kills the job. For elastic torch jobs the
backend starts this process first, on the job's master port, and gives every trainer
``PET_RDZV_ENDPOINT`` pointing here with ``is_host=false``: no trainer is a single point of failure,
trainers may come and go (scale up, scale down, a killed trainer) while the store stays.

Runs in the job's own environment, where torch is installed; torch is imported only when this runs.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading

__all__ = ["serve"]


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Host the store until SIGTERM."""
    dist = importlib.import_module("torch.distributed")
    store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"rendezvous store listening on {host}:{port}", flush=True)
    stop.wait()
    del store


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        sys.exit("usage: python -m paddlecloud.runtime.rendezvous PORT [HOST]")
    serve(int(sys.argv[1]), *sys.argv[2:])
