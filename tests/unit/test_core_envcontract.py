"""core.envcontract.worker_env per framework and role, and runtime.env() reading it back."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from paddlecloud.core.envcontract import Topology, WorkerContext, new_rendezvous_key, worker_env
from paddlecloud.runtime import WorkerEnv, env

PS = ["10.0.0.1:6000", "10.0.0.2:6001"]
TR = ["10.0.1.1:7000", "10.0.1.2:7001", "10.0.1.3:7002"]
TOPO = Topology(PS, TR, gloo_endpoint="10.0.0.1:6100", master_endpoint="10.0.1.1:29500")
COLLECTIVE_TOPO = Topology([], TR, master_endpoint="10.0.1.1:29500")


def ctx(
    framework: str,
    role: str = "trainer",
    index: int = 0,
    *,
    topology: Topology = TOPO,
    gpus: Sequence[int] | None = None,
    user_env: dict[str, str] | None = None,
    restart: int = 0,
) -> WorkerContext:
    return WorkerContext(
        job_name="fit",
        user="alice",
        framework=framework,
        role=role,
        index=index,
        topology=topology,
        output_dir="/out/alice/fit",
        restart=restart,
        gpus=gpus,
        user_env=user_env or {},
    )


PADDLE_PS_PSERVER_1 = {
    "TRAINING_ROLE": "PSERVER",
    "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(PS),
    "PADDLE_PSERVER_NUMS": "2",
    "PADDLE_TRAINER_ENDPOINTS": ",".join(TR),
    "PADDLE_TRAINERS_NUM": "3",
    "PADDLE_TRAINER_ID": "1",
    "PADDLE_CURRENT_ENDPOINT": "10.0.0.2:6001",
    "PADDLE_PORT": "6001",
    "POD_IP": "10.0.0.2",
    "PADDLE_WITH_GLOO": "1",
    "PADDLE_GLOO_RENDEZVOUS": "3",
    "PADDLE_GLOO_HTTP_ENDPOINT": "10.0.0.1:6100",
    "PADDLE_INIT_PORT": "6001",
    "PADDLE_INIT_TRAINER_ID": "1",
    "PADDLE_INIT_TRAINER_COUNT": "3",
    "PADDLE_INIT_NUM_GRADIENT_SERVERS": "3",
    "PADDLE_INIT_PSERVERS": "10.0.0.1,10.0.0.2",
    "PADDLE_INIT_PORTS_NUM": "1",
    "PADDLE_INIT_USE_GPU": "0",
    "PADDLECLOUD_ROLE": "pserver",
    "PADDLECLOUD_WORKER": "pserver-1",
    "PADDLECLOUD_TRAINER_ID": "1",
    "PADDLECLOUD_PORT": "6001",
    "PADDLECLOUD_POD_IP": "10.0.0.2",
    "PADDLECLOUD_CURRENT_ENDPOINT": "10.0.0.2:6001",
    "PADDLECLOUD_PSERVER_ENDPOINTS": ",".join(PS),
    "PADDLECLOUD_TRAINER_ENDPOINTS": ",".join(TR),
}

PADDLE_PS_TRAINER_2 = {
    "TRAINING_ROLE": "TRAINER",
    "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(PS),
    "PADDLE_TRAINER_ENDPOINTS": ",".join(TR),
    "PADDLE_TRAINERS_NUM": "3",
    "PADDLE_TRAINER_ID": "2",
    "PADDLE_CURRENT_ENDPOINT": "10.0.1.3:7002",
    "PADDLE_PORT": "7002",
    "POD_IP": "10.0.1.3",
    "PADDLE_WITH_GLOO": "1",
    "PADDLE_GLOO_RENDEZVOUS": "3",
    "PADDLE_GLOO_HTTP_ENDPOINT": "10.0.0.1:6100",
    "PADDLE_INIT_PORT": "7002",
    "PADDLE_INIT_TRAINER_ID": "2",
    "PADDLE_INIT_PSERVERS": "10.0.0.1,10.0.0.2",
    "PADDLECLOUD_WORKER": "trainer-2",
    "PADDLECLOUD_TRAINER_ID": "2",
    "PADDLECLOUD_TRAINERS": "3",
    "PADDLECLOUD_PSERVERS": "2",
}

PADDLE_COLLECTIVE_TRAINER_1 = {
    "TRAINING_ROLE": "TRAINER",
    "PADDLE_CURRENT_ENDPOINT": "10.0.1.2:7001",
    "PADDLE_TRAINER_ENDPOINTS": ",".join(TR),
    "PADDLE_TRAINERS_NUM": "3",
    "PADDLE_TRAINER_ID": "1",
    "PADDLE_MASTER": "10.0.1.1:29500",
    "PADDLE_DISTRI_BACKEND": "gloo",
    "PADDLE_PORT": "7001",
    "POD_IP": "10.0.1.2",
    "PADDLECLOUD_PSERVERS": "0",
    "PADDLECLOUD_PSERVER_ENDPOINTS": "",
}

TORCH_TRAINER_2 = {
    "MASTER_ADDR": "10.0.1.1",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "1",
    "GROUP_RANK": "2",
    "PADDLECLOUD_CURRENT_ENDPOINT": "10.0.1.3:7002",
    # torchrun train.py: the same world, as a static rendezvous (issue 25: it made N worlds of 1)
    "PET_NNODES": "3",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "2",
    "PET_RDZV_BACKEND": "static",
    "PET_MASTER_ADDR": "10.0.1.1",
    "PET_MASTER_PORT": "29500",
}

PLATFORM_KEYS = {
    "PADDLECLOUD_JOB_NAME": "fit",
    "PADDLECLOUD_JOB_USER": "alice",
    "PADDLECLOUD_OUTPUT_DIR": "/out/alice/fit",
    "PADDLECLOUD_RESTART": "0",
    "PYTHONUNBUFFERED": "1",
}


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        pytest.param(ctx("paddle-ps", "pserver", 1), PADDLE_PS_PSERVER_1, id="paddle-ps-pserver"),
        pytest.param(ctx("paddle-ps", "trainer", 2), PADDLE_PS_TRAINER_2, id="paddle-ps-trainer"),
        pytest.param(
            ctx("paddle-collective", index=1, topology=COLLECTIVE_TOPO),
            PADDLE_COLLECTIVE_TRAINER_1,
            id="paddle-collective",
        ),
        pytest.param(ctx("torch", index=2, topology=COLLECTIVE_TOPO), TORCH_TRAINER_2, id="torch"),
    ],
)
def test_framework_variables(context: WorkerContext, expected: dict[str, str]) -> None:
    got = worker_env(context)
    assert {k: got.get(k) for k in expected} == expected
    assert {k: got.get(k) for k in PLATFORM_KEYS} == PLATFORM_KEYS


@pytest.mark.parametrize(
    ("framework", "absent"),
    [
        ("torch", ["TRAINING_ROLE", "PADDLE_TRAINER_ID", "PADDLE_MASTER", "PADDLE_WITH_GLOO"]),
        ("paddle-collective", ["MASTER_ADDR", "RANK", "PADDLE_WITH_GLOO", "PADDLE_PSERVERS_IP_PORT_LIST"]),
        ("paddle-ps", ["MASTER_ADDR", "WORLD_SIZE", "PADDLE_MASTER", "PADDLE_DISTRI_BACKEND"]),
        ("none", ["TRAINING_ROLE", "PADDLE_TRAINER_ID", "MASTER_ADDR", "RANK", "WORLD_SIZE"]),
    ],
)
def test_other_frameworks_variables_are_absent(framework: str, absent: list[str]) -> None:
    got = worker_env(ctx(framework))
    assert [k for k in absent if k in got] == []
    assert got["PADDLECLOUD_JOB_NAME"] == "fit"


@pytest.mark.parametrize("framework", ["paddle-ps", "paddle-collective", "torch", "none"])
@pytest.mark.parametrize(
    ("gpus", "cuda", "nvidia"),
    [(None, None, None), ((), "", "none"), ((2,), "2", "2"), ((0, 3), "0,3", "0,3")],
)
def test_cuda_visible_devices_only_when_gpus_are_assigned(
    framework: str, gpus: tuple[int, ...] | None, cuda: str | None, nvidia: str | None
) -> None:
    got = worker_env(ctx(framework, gpus=gpus))
    assert got.get("CUDA_VISIBLE_DEVICES") == cuda
    assert got.get("NVIDIA_VISIBLE_DEVICES") == nvidia


@pytest.mark.parametrize(
    ("framework", "gpus", "key", "value"),
    [
        ("paddle-collective", (0,), "PADDLE_DISTRI_BACKEND", "nccl"),
        ("paddle-collective", None, "PADDLE_DISTRI_BACKEND", "gloo"),
        ("paddle-collective", (), "PADDLE_DISTRI_BACKEND", "gloo"),
        ("paddle-ps", (1,), "PADDLE_INIT_USE_GPU", "1"),
        ("paddle-ps", None, "PADDLE_INIT_USE_GPU", "0"),
    ],
)
def test_gpu_dependent_values(framework: str, gpus: tuple[int, ...] | None, key: str, value: str) -> None:
    assert worker_env(ctx(framework, gpus=gpus))[key] == value


@pytest.mark.parametrize(
    ("framework", "user_env"),
    [
        ("paddle-ps", {"PADDLE_TRAINER_ID": "9", "TRAINING_ROLE": "X", "MY_FLAG": "1"}),
        ("torch", {"MASTER_PORT": "1", "RANK": "7"}),
        ("none", {"PADDLECLOUD_JOB_NAME": "override", "PYTHONUNBUFFERED": "0"}),
        ("paddle-collective", {"CUDA_VISIBLE_DEVICES": "5"}),
    ],
)
def test_user_env_wins(framework: str, user_env: dict[str, str]) -> None:
    got = worker_env(ctx(framework, gpus=(0,), user_env=user_env))
    assert {k: got[k] for k in user_env} == user_env


def test_all_values_are_strings() -> None:
    got = worker_env(ctx("paddle-ps", "pserver", 0, gpus=(1,), restart=2))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in got.items())


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        pytest.param(
            ctx("paddle-ps", "trainer", 1, restart=3),
            WorkerEnv(
                job_name="fit",
                role="trainer",
                worker="trainer-1",
                trainer_id=1,
                trainers=3,
                pserver_endpoints=tuple(PS),
                trainer_endpoints=tuple(TR),
                current_endpoint=TR[1],
                output_dir="/out/alice/fit",
                restart=3,
            ),
            id="paddle-ps-trainer",
        ),
        pytest.param(
            ctx("paddle-ps", "pserver", 0),
            WorkerEnv(
                job_name="fit",
                role="pserver",
                worker="pserver-0",
                trainer_id=0,
                trainers=3,
                pserver_endpoints=tuple(PS),
                trainer_endpoints=tuple(TR),
                current_endpoint=PS[0],
                output_dir="/out/alice/fit",
                restart=0,
            ),
            id="paddle-ps-pserver",
        ),
        pytest.param(
            ctx("torch", "trainer", 2, topology=COLLECTIVE_TOPO),
            WorkerEnv(
                job_name="fit",
                role="trainer",
                worker="trainer-2",
                trainer_id=2,
                trainers=3,
                pserver_endpoints=(),
                trainer_endpoints=tuple(TR),
                current_endpoint=TR[2],
                output_dir="/out/alice/fit",
                restart=0,
            ),
            id="torch-no-pservers",
        ),
    ],
)
def test_runtime_env_reads_back_worker_env(context: WorkerContext, expected: WorkerEnv) -> None:
    assert env(worker_env(context)) == expected


def test_runtime_env_outside_a_worker_raises_key_error() -> None:
    with pytest.raises(KeyError):
        env({})


def test_elastic_torch_trainers_are_torchrun_agents_on_the_platform_store() -> None:
    topo = Topology((), ("127.0.0.1:4001", "127.0.0.1:4002"), master_endpoint="127.0.0.1:4009")
    ctx = WorkerContext(
        job_name="el", user="alice", framework="torch", role="trainer", index=1, topology=topo,
        output_dir="/out", trainer_range=(1, 4), rendezvous_key="k" * 64,
    )  # fmt: skip
    env = worker_env(ctx)
    assert env["PADDLECLOUD_RDZV_KEY"] == "k" * 64  # signs the rendezvous state (runtime.torchelastic)
    assert "k" * 64 not in repr(ctx)
    assert env["PET_NNODES"] == "1:4"
    assert env["PET_RDZV_ENDPOINT"] == "127.0.0.1:4009"
    assert "is_host=false" in env["PET_RDZV_CONF"]
    assert env["PET_RDZV_ID"] == "alice-el"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env["TORCH_ELASTIC_WORKER_IDENTICAL"] == "1"
    assert env["PET_RDZV_BACKEND"] == "paddlecloud"  # c10d kept open when an agent fails
    conf = dict(kv.split("=") for kv in env["PET_RDZV_CONF"].split(","))
    assert conf == {"is_host": "false", "last_call_timeout": "1", "keep_alive_interval": "1",
                    "keep_alive_max_attempt": "3", "read_timeout": "10"}  # fmt: skip
    assert "RANK" not in env and "WORLD_SIZE" not in env  # torchrun assigns them per rendezvous round
    assert env["PADDLECLOUD_CHECKPOINT_DIR"] == "/out/checkpoints"


def test_rendezvous_keys_are_random_and_only_elastic_torch_trainers_get_one() -> None:
    keys = {new_rendezvous_key() for _ in range(3)}
    assert len(keys) == 3 and all(len(k) == 64 and int(k, 16) >= 0 for k in keys)
    topo = Topology((), ("127.0.0.1:4001",), master_endpoint="127.0.0.1:4009")
    static = WorkerContext(
        job_name="st", user="alice", framework="torch", role="trainer", index=0, topology=topo,
        output_dir="/out", rendezvous_key="k" * 64,
    )  # fmt: skip
    assert "PADDLECLOUD_RDZV_KEY" not in worker_env(static)  # no rendezvous: a fixed torch job
