"""Fixtures of the Kubernetes contract suite: a fake API server, real clients, the TrainingJob CRD.

    kube      FakeKube on 127.0.0.1 (its own thread and loop), closed after the test
    api       a ``kubernetes.client.ApiClient`` pointed at it
    crd       the TrainingJob CRD (``backends.kubernetes.crd.manifest()``) created through the API
    kubelet   moves pods along (binding, status, logs): the fake has no kubelet

Tests needing a real cluster are marked ``cluster`` and skipped unless ``PADDLECLOUD_KUBECONFIG``
names a kubeconfig whose API server answers (docs/kubernetes.md: running them on kind/minikube).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")
pytest.importorskip("kopf")

from kubernetes import client

from tests.kube.fakeapi import FakeKube
from tests.kube.kubelet import Kubelet

#: the longest a contract test waits for the operator or the backend to get somewhere
DEADLINE_S = 15.0


def _cluster_reachable() -> str | None:
    path = os.environ.get("PADDLECLOUD_KUBECONFIG")
    if not path or not Path(path).is_file():
        return None
    from kubernetes import config

    try:
        api = config.new_client_from_config(config_file=path)
        client.VersionApi(api).get_code(_request_timeout=5, _preload_content=False)
    except Exception:
        return None
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("cluster" in item.keywords for item in items) and _cluster_reachable() is None:
        skip = pytest.mark.skip(
            reason="needs a real cluster: set PADDLECLOUD_KUBECONFIG (docs/kubernetes.md)"
        )
        for item in items:
            if "cluster" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def api(kube: FakeKube) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=kube.url)) as c:
        yield c


@pytest.fixture
def crd(kube: FakeKube, api: client.ApiClient) -> dict[str, Any]:
    from paddlecloud.backends.kubernetes.crd import manifest

    client.ApiextensionsV1Api(api).create_custom_resource_definition(manifest())
    return manifest()


@pytest.fixture
def kubelet(kube: FakeKube, api: client.ApiClient) -> Kubelet:
    return Kubelet(kube, api)


@pytest.fixture
def custom(api: client.ApiClient, crd: dict[str, Any]) -> client.CustomObjectsApi:
    """The custom objects API, with the CRD and the test namespace made (a test's own ``custom``
    fixture may make another)."""
    from tests.kube.helpers import NS  # helpers imports this module

    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    return client.CustomObjectsApi(api)


@pytest.fixture
def operator(kube: FakeKube, custom: client.CustomObjectsApi) -> Iterator[None]:
    """The operator running in a thread for the test; it must stop without an exception."""
    from tests.kube.helpers import running_operator

    with running_operator(kube) as runner:
        yield
    assert runner.exception is None


def wait_for(what: str, check: Callable[[], Any], timeout: float = DEADLINE_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
