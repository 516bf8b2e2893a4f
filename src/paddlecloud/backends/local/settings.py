"""Settings of the local backend (``paddlecloud up`` without ``--backend``, or ``--backend local``).

Made by the backend registry (``backends.registry``) from ``up``'s options; the platform's own
configuration holds them as an opaque object and hands them back to :func:`backend.create`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from paddlecloud.backends.local.isolation import RunLimits
from paddlecloud.backends.local.nodes import NodeShape
from paddlecloud.backends.options import cache_size, insecure_registries, isolation_mode, quantity

__all__ = ["LocalSettings"]


@dataclass(frozen=True)
class LocalSettings:
    #: the virtual nodes (``--nodes``, ``--node-cpu``, ``--node-memory``, ``--node-gpu``)
    nodes: NodeShape = field(default_factory=NodeShape)
    #: cap of the job environment cache (``<data>/cluster/envs``; None: no cap)
    env_cache_bytes: int | None = 20 * 2**30
    #: auto | sandbox | none, how each worker is confined (docs/security.md)
    isolation: str = "auto"
    #: server environment variables workers get besides the defaults
    pass_env: tuple[str, ...] = ()
    #: what every run gets besides its --memory and --cpu (``--max-pids``, ``--max-log-size``)
    limits: RunLimits = field(default_factory=RunLimits)
    #: the cgroup runs' cgroups go under (``--cgroup-root``; None: under the server's own)
    cgroup_root: str | None = None
    #: registries pulled from over plain HTTP (``--insecure-registry``)
    insecure_registries: tuple[str, ...] = ()
    #: cap of the pulled and unpacked images (``--image-cache-size``; None: no cap)
    image_cache_bytes: int | None = 50 * 2**30

    #: the ``up`` options these settings are made from
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "nodes", "node_cpu", "node_memory", "node_gpu", "env_cache_size", "isolation", "pass_env",
        "cgroup_root", "insecure_registry", "image_cache_size", *RunLimits.OPTIONS,
    )  # fmt: skip

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> LocalSettings:
        cache = options.get("env_cache_size")
        return cls(
            nodes=NodeShape(
                count=int(options.get("nodes") or 1),
                cpu_m=quantity("cpu", options.get("node_cpu"), "--node-cpu"),
                memory=quantity("memory", options.get("node_memory"), "--node-memory"),
                gpu=options.get("node_gpu"),
            ),
            env_cache_bytes=cls.env_cache_bytes
            if cache is None
            else None
            if cache == "none"
            else quantity("memory", cache, "--env-cache-size"),
            isolation=isolation_mode(options.get("isolation")),
            pass_env=tuple(options.get("pass_env") or ()),
            limits=RunLimits.from_options(options),
            cgroup_root=options.get("cgroup_root") or None,
            insecure_registries=insecure_registries(options.get("insecure_registry")),
            image_cache_bytes=cache_size(
                options.get("image_cache_size"), cls.image_cache_bytes, "--image-cache-size"
            ),
        )
