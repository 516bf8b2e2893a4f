"""How a Slurm node keeps a run (``backends/slurm/nodekeep.py``): the spec's round trip, which hosts a
job's VXLAN joins, the monitor's command line, and the server's VNIs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.slurm.backend import SlurmBackend
from paddlecloud.backends.slurm.job_record import JobRecord
from paddlecloud.backends.slurm.nodekeep import RunKeep
from paddlecloud.backends.start_sequence import Stage
from paddlecloud.node import netns

ADDRESSES = {"c1": "10.77.0.11", "c2": "10.77.0.12", "c3": "10.77.0.13"}


def test_the_keep_survives_its_json_and_a_bad_one_is_refused() -> None:
    keep = RunKeep(log="/x/logs/t.0.log", max_log_bytes=2**20, max_pids=64, netns="pcs-ab", vni=5000,
                   addresses=ADDRESSES, api_target="10.77.0.1:8080", api_dir="/var/cache/pc/run")  # fmt: skip
    assert RunKeep.from_dict(keep.to_dict()) == keep
    for bad in ({}, {"log": 3}, {"log": "x", "addresses": ["c1"]}, {"log": "x", "vni": "5000"}):
        with pytest.raises(ValueError):
            RunKeep.from_dict(bad)


def test_a_job_on_a_node_with_an_address_joins_its_vxlan_with_every_other_node() -> None:
    keep = RunKeep(log="l", netns="pcs-ab", vni=5000, addresses=ADDRESSES)
    net = keep._net("c2")
    assert net.name == "pcs-ab" and net.vxlan is not None
    assert net.vxlan.vni == 5000 and net.vxlan.local == "10.77.0.12"
    assert net.vxlan.peers == ("10.77.0.11", "10.77.0.13")


def test_nodes_that_share_a_loopback_host_share_one_namespace_without_a_vxlan() -> None:
    emulated = {"n1": "127.0.0.1", "n2": "127.0.0.1", "n3": "127.0.0.1"}
    assert RunKeep(log="l", netns="pcs-ab", vni=5000, addresses=emulated)._net("n2").vxlan is None
    assert RunKeep(log="l", netns="pcs-ab", vni=0, addresses=ADDRESSES)._net("c1").vxlan is None
    assert RunKeep(log="l", netns="pcs-ab", vni=5000, addresses={"c1": "10.77.0.11"})._net("c1").vxlan is None


def test_the_monitor_keeps_the_log_ready_mark_and_pids_without_a_network() -> None:
    keep = RunKeep(
        log="/j/logs/p.0.log", max_log_bytes=2**20, ready_port=21001, ready_file="/j/run/p.0.ready"
    )
    argv = keep.prepare("c1", "17", "/j/run/p.0/exit.json")
    assert argv[-1] == "--" and "--release-netns" not in argv and "--api-fd" not in argv
    joined = " ".join(argv)
    assert "--log /j/logs/p.0.log" in joined and "--max-log-bytes 1048576" in joined
    assert "--ready-port 21001 --ready-file /j/run/p.0.ready" in joined


def _backend(tmp_path: Path) -> SlurmBackend:
    backend = object.__new__(SlurmBackend)  # the VNI choice needs no Slurm: only its records
    backend.root, backend._jobs = tmp_path, {}
    return backend


def _job(tmp_path: Path, key: str, vni: int, stage: Stage = Stage.TRAINERS) -> JobRecord:
    user, _, name = key.partition("/")
    launch = JobLaunch(key=key, user=user, name=name, framework="none", entry="true",
                       package=tmp_path / "p", output_dir=tmp_path / "o", placement=())  # fmt: skip
    return JobRecord(launch, tmp_path, {}, (0, 0), stage, vni=vni)


def test_vnis_come_from_the_job_and_the_server_and_never_repeat_a_live_jobs(tmp_path: Path) -> None:
    """Found in review: VNIs were handed out from 4096 up, the one of a job just ended first, and
    two servers on one cluster started at the same one."""
    one, other = _backend(tmp_path / "a"), _backend(tmp_path / "b")
    first = one._free_vni("alice/job")
    assert 4096 <= first < 2**24 and first == one._free_vni("alice/job")  # the job's own, stable
    assert first != other._free_vni("alice/job")  # another server, another VNI
    one._jobs["alice/job"] = _job(tmp_path, "alice/job", first)
    assert one._free_vni("alice/job") != first  # never a live job's
    one._jobs["alice/job"] = _job(tmp_path, "alice/job", first, Stage.DONE)
    assert one._free_vni("alice/job") == first


def test_a_namespace_left_by_a_killed_node_is_collected_only_when_old_and_unheld() -> None:
    if netns.probe() is not None:
        pytest.skip("network namespaces cannot be made here")
    name = f"pcs-test{int(time.time() * 1000) % 10**8}"
    netns.ensure(netns.JobNet(name))
    try:
        assert netns.collect(name, older_than=3600) == 0 and netns.exists(name)  # young: a run starting
        assert netns.collect(name, older_than=0) == 1 and not netns.exists(name)  # old, empty, unheld
    finally:
        if netns.exists(name):
            netns.remove(name)
