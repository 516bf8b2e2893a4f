"""PaddleCloud: run distributed deep-learning training on a cluster.

The package is layered (see ``docs/architecture.md``); this top level only re-exports the public SDK,
lazily, so that ``import paddlecloud.runtime`` inside a worker needs nothing but the standard library.

    import paddlecloud
    client = paddlecloud.Client()          # reads ~/.paddle/config
    job = paddlecloud.train(package="examples/fit_a_line", entry="python train.py",
                            framework="paddle-ps", pservers=2, trainers=2, wait=True)
"""

from __future__ import annotations

from paddlecloud._version import API_VERSION, __version__

# typing is not imported at run time: every worker's monitor and launcher import this package
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from paddlecloud.client import Client, train

__all__ = ["API_VERSION", "Client", "__version__", "train"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from paddlecloud.client import Client

        return Client
    if name == "train":
        from paddlecloud.client import train

        return train
    raise AttributeError(f"module 'paddlecloud' has no attribute {name!r}")
