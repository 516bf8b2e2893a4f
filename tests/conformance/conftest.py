"""The backends the conformance suite runs against: ``HARNESSES`` (name -> a context manager that
makes a :class:`~tests.conformance.harness.Harness` in a temp dir). A new backend joins the suite
with one line there (and its harness class in ``harness.py``), e.g.::

    "slurm": slurm,   # a private cluster from scripts/ensure-slurm.sh
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.backends.base import Capability
from tests.conformance.harness import Harness, KubeHarness, LocalHarness, MemoryHarness, SlurmHarness


@contextlib.contextmanager
def memory(tmp_path: Path) -> Iterator[Harness]:
    from paddlecloud.backends.memory import MemoryBackend, MemoryEngine, MemorySettings

    yield MemoryHarness(MemoryBackend(MemorySettings(engine=MemoryEngine())))


@contextlib.contextmanager
def memory_minimal(tmp_path: Path) -> Iterator[Harness]:
    """The in-memory backend declaring no optional capability: what it must refuse."""
    from paddlecloud.backends.memory import MemoryBackend, MemoryEngine, MemorySettings

    settings = MemorySettings(capabilities=frozenset(), engine=MemoryEngine())
    yield MemoryHarness(MemoryBackend(settings))


@contextlib.contextmanager
def local(tmp_path: Path) -> Iterator[Harness]:
    h = LocalHarness(tmp_path)
    try:
        yield h
    finally:
        for key in h.sizes:
            with contextlib.suppress(Exception):
                h.backend.stop(key, 0.0)
        h.backend.close()


@contextlib.contextmanager
def kubernetes(tmp_path: Path) -> Iterator[Harness]:
    pytest.importorskip("kubernetes")
    pytest.importorskip("kopf")
    from kubernetes import client

    from paddlecloud.backends.kubernetes.crd import manifest
    from tests.kube.fakeapi import FakeKube
    from tests.kube.helpers import AutoKubelet, running_operator
    from tests.kube.kubelet import Kubelet

    with FakeKube() as kube, client.ApiClient(client.Configuration(host=kube.url)) as api:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(manifest())
        kube.add_node("node-1", cpu="16", memory="64Gi", gpu=4)
        with running_operator(kube), AutoKubelet(kube, Kubelet(kube, api), KubeHarness.NS) as kubelet:
            h = KubeHarness(kube, None)
            h.reopen()
            yield h
            h.backend.close()
            assert kubelet.errors == []


@contextlib.contextmanager
def slurm(tmp_path: Path) -> Iterator[Harness]:
    from tests.slurm.conftest import ensure_cluster

    ensure_cluster()
    h = SlurmHarness(tmp_path)
    try:
        yield h
    finally:
        for key in h.sizes:
            with contextlib.suppress(Exception):
                h.backend.stop(key, 0.0)


#: every backend the contract is checked against; a new backend joins with one line
HARNESSES: dict[str, Callable[[Path], contextlib.AbstractContextManager[Harness]]] = {
    "memory": memory,
    "memory-minimal": memory_minimal,
    "local": local,
    "kubernetes": kubernetes,
    "slurm": slurm,  # a private cluster from scripts/ensure-slurm.sh
}


@pytest.fixture(params=list(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    with HARNESSES[request.param](tmp_path) as h:
        yield h


def declares(h: Any, capability: Capability) -> bool:
    return capability in h.backend.capabilities
