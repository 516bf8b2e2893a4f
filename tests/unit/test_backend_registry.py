"""The backend registry: names -> settings and a lazily imported factory; nothing else names backends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.backends import (
    BackendConfigError,
    BackendEntry,
    BackendSetup,
    OptionError,
    UnknownBackend,
    registry,
)
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.local import LocalBackend, LocalSettings, NodeShape
from paddlecloud.controller import Platform, PlatformConfig

MADE: list[BackendSetup] = []


@dataclass(frozen=True)
class ToySettings:
    size: int = 3
    OPTIONS = ("toy_size",)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ToySettings:
        return cls(size=int(options.get("toy_size") or 3))


def make_toy(setup: BackendSetup) -> LocalBackend:
    """A registered backend's factory: records what it was made from, and is a local backend."""
    MADE.append(setup)
    settings = LocalSettings(nodes=NodeShape(count=setup.settings.size, cpu_m=1000), isolation="none")
    from paddlecloud.backends.local.backend import create

    return create(BackendSetup(settings, setup.data_dir, setup.datacenter, setup.now, setup.wake))


@pytest.fixture
def toy() -> Iterator[BackendEntry]:
    entry = BackendEntry("toy", "a test backend", ToySettings, f"{__name__}:make_toy", ToySettings.OPTIONS)
    registry.register(entry)
    MADE.clear()
    yield entry
    registry._entries().pop("toy")


def test_unknown_backend_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownBackend) as err:
        Platform.open(PlatformConfig(data_dir=tmp_path, backend="lsf"))
    assert "unknown backend 'lsf'" in str(err.value)
    assert "local (" in str(err.value) and "kubernetes (" in str(err.value)


def test_a_registered_backend_is_made_by_its_entry(toy: BackendEntry, tmp_path: Path) -> None:
    settings = toy.settings({"toy_size": "2", "node_cpu": "ignored: not this backend's"})
    assert settings == ToySettings(size=2)
    platform = Platform.open(PlatformConfig(data_dir=tmp_path, backend="toy", backend_settings=settings))
    try:
        assert [n.name for n in platform.ctx.backend.nodes()] == ["node-0", "node-1"]
        (setup,) = MADE
        assert setup.settings == ToySettings(size=2)
        assert setup.data_dir == tmp_path.resolve() and setup.cluster_dir == tmp_path.resolve() / "cluster"
    finally:
        platform.close()


def test_no_settings_means_the_entrys_defaults(toy: BackendEntry, tmp_path: Path) -> None:
    platform = Platform.open(PlatformConfig(data_dir=tmp_path, backend="toy"))
    try:
        assert MADE[0].settings == ToySettings() and len(platform.ctx.backend.nodes()) == 3
    finally:
        platform.close()


def test_a_backend_whose_module_is_missing_names_its_extra(tmp_path: Path) -> None:
    entry = BackendEntry("gone", "missing", ToySettings, "paddlecloud.backends.nowhere:create", extra="gone")
    with pytest.raises(UnknownBackend, match=r"pip install 'paddlecloud\[gone\]'"):
        entry.create(BackendSetup(None, tmp_path))


def test_local_settings_from_up_options() -> None:
    local = registry.entry("local")
    made = local.settings(
        {"nodes": 2, "node_cpu": "1500m", "node_memory": "2Gi", "env_cache_size": "none", "pass_env": ("A",)}
    )
    assert made == LocalSettings(
        nodes=NodeShape(count=2, cpu_m=1500, memory=2 * 2**30), env_cache_bytes=None, pass_env=("A",)
    )
    assert local.settings({}) == LocalSettings()
    with pytest.raises(OptionError) as err:
        local.settings({"node_memory": "lots"})
    assert err.value.option == "--node-memory"


def test_kubernetes_settings_from_up_options(tmp_path: Path) -> None:
    made = registry.entry("kubernetes").settings(
        {"kubeconfig": tmp_path / "kc", "kube_namespace": "ns", "isolation": "none"}
    )
    assert made == KubeSettings(kubeconfig=str(tmp_path / "kc"), namespace="ns")


def test_slurm_port_range_from_up_options() -> None:
    slurm = registry.entry("slurm")
    assert slurm.settings({"slurm_ports": "30000-30099"}).ports == (30000, 30099)
    assert slurm.settings({}).ports == (21000, 28999)
    for bad in ("30000", "x-y", "80-2000", "30000-30001", "40000-30000", "60000-70000"):
        with pytest.raises(OptionError, match="LO-HI") as err:
            slurm.settings({"slurm_ports": bad})
        assert err.value.option == "--slurm-ports"


def test_slurm_fence_time_from_up_options() -> None:
    slurm = registry.entry("slurm")
    assert slurm.settings({}).fence_after_s is None  # half of Slurm's SlurmdTimeout
    assert slurm.settings({"slurm_fence_after": "off"}).fence_after_s == 0
    assert slurm.settings({"slurm_fence_after": "60"}).fence_after_s == 60
    for bad in ("0", "-5", "soon", "100000"):
        with pytest.raises(OptionError, match="seconds") as err:
            slurm.settings({"slurm_fence_after": bad})
        assert err.value.option == "--slurm-fence-after"


def test_settings_of_another_backend_are_refused(tmp_path: Path) -> None:
    config = PlatformConfig(data_dir=tmp_path, backend="local", backend_settings=KubeSettings())
    with pytest.raises(BackendConfigError, match="the local backend takes LocalSettings, not KubeSettings"):
        Platform.open(config)


def test_insecure_registries_from_up_options() -> None:
    """``up --insecure-registry`` (issue 27): registries pulled from over plain HTTP, each checked
    as a reference's registry part, for both backends that pull images."""
    for name in ("local", "slurm"):
        entry = registry.entry(name)
        made = entry.settings({"insecure_registry": ("10.0.0.5:5000", "registry.lab")})
        assert made.insecure_registries == ("10.0.0.5:5000", "registry.lab")  # type: ignore[attr-defined]
        assert entry.settings({}).insecure_registries == ()  # type: ignore[attr-defined]
        for bad in ("http://10.0.0.5:5000", "10.0.0.5:5000/team", "no_underscores:5000", "x:99999999"):
            with pytest.raises(OptionError, match="HOST") as err:
                entry.settings({"insecure_registry": (bad,)})
            assert err.value.option == "--insecure-registry"
