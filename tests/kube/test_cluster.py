"""The same contract against a real API server (kind, minikube, ...): skipped unless
``PADDLECLOUD_KUBECONFIG`` names a kubeconfig that reaches one (docs/kubernetes.md, "Contract tests
on a real cluster").

The real server checks what the fake cannot: the CRD's CEL rules, admission, the pod schema. The
test needs no image to be pullable: a pod that cannot start is itself a reason the job reports.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.backend import KubernetesBackend
from paddlecloud.backends.kubernetes.kube import Kube, api_status, connect
from paddlecloud.backends.kubernetes.operator import OperatorConfig, registry
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.core.envcontract import ApiAccess, JobFiles
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from tests.kube.conftest import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT_S = 120.0


@pytest.fixture
def real() -> Iterator[tuple[Kube, str]]:
    kube = connect(os.environ["PADDLECLOUD_KUBECONFIG"], timeout_s=20.0)
    ext = client.ApiextensionsV1Api(kube.api)
    try:
        ext.create_custom_resource_definition(crd.manifest())
    except client.ApiException as exc:
        if api_status(exc) != 409:
            raise
    wait_for("the CRD", lambda: kube.list_jobs() is not None, timeout=TIMEOUT_S)
    ns = f"pc-test-{uuid.uuid4().hex[:6]}"
    kube.call(kube.core.create_namespace, {"metadata": {"name": ns}})
    try:
        yield kube, ns
    finally:
        kube.call(kube.core.delete_namespace, ns)


def test_backend_and_operator_on_a_real_api_server(real: tuple[Kube, str]) -> None:
    from kopf.testing import KopfRunner

    kube, ns = real
    settings = KubeSettings(namespace=ns, grace_s=1)
    backend = KubernetesBackend(settings, kube=kube)
    launch = JobLaunch(
        key="alice/hello",
        user="alice",
        name="hello",
        framework="none",
        entry="python -c 'print(1)'",
        package=Path("/unused"),
        output_dir=Path("/unused"),
        placement=(WorkerPlacement("trainer", 0, ""), WorkerPlacement("trainer", 1, "")),
        files=JobFiles(output="/pfs/local/home/alice/jobs/hello/output"),
        api=ApiAccess("http://paddlecloud-api.paddlecloud.svc:8080", "pcj_test"),
        resources={"trainer": Resources(100, 64 * 2**20)},
        trainer_range=(1, 3),
        package_path="/pfs/local/home/alice/jobs/hello/package.tar.gz",
    )
    with KopfRunner(
        ["run", "--standalone", "-n", ns], registry=registry(kube, OperatorConfig(resync_s=5)), timeout=60
    ):
        backend.start(launch)
        name = "alice-hello"
        selector = f"{crd.LABEL_JOB}={name}"
        wait_for("two trainer pods", lambda: len(kube.list_pods(ns, selector)) == 2, timeout=TIMEOUT_S)
        job = wait_for(
            "a status", lambda: kube.get_job(ns, name).get("status", {}).get("reason"), timeout=TIMEOUT_S
        )
        assert job
        events = wait_for("why it waits", lambda: backend.sync("alice/hello").events, timeout=TIMEOUT_S)
        assert events
        backend.add_trainer("alice/hello", WorkerPlacement("trainer", 2, ""))
        assert kube.get_scale(ns, name)["spec"]["replicas"] == 3
        wait_for("trainer-2", lambda: len(kube.list_pods(ns, selector)) == 3, timeout=TIMEOUT_S)
        backend.stop("alice/hello", 1)
        deadline = time.monotonic() + TIMEOUT_S
        while kube.list_pods(ns, selector) and time.monotonic() < deadline:
            time.sleep(1)
        assert kube.list_pods(ns, selector) == []
        assert wait_for("finished", lambda: backend.sync("alice/hello").finished, timeout=TIMEOUT_S)
