"""Priority classes by name and the default compute quota of new users, through the SDK."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from paddlecloud.api.errors import ErrorCode, InvalidInput
from paddlecloud.api.models import PRIORITY_CLASSES, JobSpec, UserCreate
from paddlecloud.client import Client
from paddlecloud.controller import ComputeLimits, Identity, Platform

pytestmark = pytest.mark.timeout(60)

MakePackage = Callable[[dict[str, str]], Path]
Asgi = Callable[[Platform], httpx.Client]
PKG = {"main.py": "print('hi')\n"}


@pytest.mark.parametrize(
    ("given", "stored"), [("low", -100), ("normal", 0), ("high", 100), (7, 7), ("-3", -3)]
)
def test_priority_classes_and_numbers(given: object, stored: int) -> None:
    spec = JobSpec.model_validate({"name": "a", "entry": "x", "package": "/pfs/local/x", "priority": given})
    assert spec.priority == stored


def test_submit_by_priority_class_and_unknown_class(alice: Client, make_package: MakePackage) -> None:
    job = alice.submit(
        {"name": "hi", "entry": "python main.py", "priority": "high"}, package_dir=make_package(PKG)
    )
    assert job.priority == PRIORITY_CLASSES["high"] == 100
    with pytest.raises(InvalidInput) as exc:
        alice.submit(
            {"name": "hi2", "entry": "python main.py", "priority": "urgent"}, package_dir=make_package(PKG)
        )
    assert exc.value.code == ErrorCode.INVALID_SPEC
    assert "urgent" in str(exc.value) and "high (100)" in str(exc.value)


def test_new_users_start_with_the_default_compute_quota(
    platform_factory: Callable[..., Platform], asgi: Asgi
) -> None:
    platform = platform_factory(default_quota=ComputeLimits(cpu_m=2000, gpu=1))
    carol = Client(endpoint="http://testserver", token=platform.ensure_user("carol"), http=asgi(platform))
    limit = carol.quota().limit
    assert limit is not None and (limit.cpu, limit.memory, limit.gpu) == ("2", "unlimited", 1)
    # users created by an admin through the API get it too; admins do not
    with platform.ctx.session() as s:
        platform.users.create(s, Identity("root", is_admin=True), UserCreate(name="dave"))
        platform.users.create(s, Identity("root", is_admin=True), UserCreate(name="erin", admin=True))
    with platform.ctx.session() as s:
        from paddlecloud.controller.model.limits import compute_quotas

        quotas = compute_quotas(s)
    assert quotas["dave"].cpu_m == 2000 and quotas["dave"].gpu == 1
    assert "erin" not in quotas


def test_without_a_default_quota_users_are_unlimited(alice: Client) -> None:
    assert alice.quota().limit is None
