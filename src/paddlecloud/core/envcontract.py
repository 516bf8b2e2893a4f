"""Build the environment of one worker process: the env contract of ``docs/env-contract.md``.

Backends compute the endpoints (the local backend allocates loopback ports; Kubernetes uses pod
addresses), fill a :class:`WorkerContext` and call :func:`worker_env`. The result is layered, later
layers winning: platform variables, framework variables, then the user's ``--env``.

A backend whose engine chooses hosts only when it starts a worker (Slurm) builds its topology with
:meth:`Topology.at_run_time` (ports it chose, hosts as ``@<worker>@`` placeholders) and sets
``WorkerContext.endpoints_dir``: the worker then publishes its host and resolves the others at run
time (``runtime.endpoints``; ``ENDPOINTS_WAIT`` names whose hosts it waits for).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from paddlecloud.runtime import contract as c
from paddlecloud.runtime import torchelastic
from paddlecloud.runtime.endpoints import PLACEHOLDER, placeholder

__all__ = [
    "ApiAccess",
    "JobFiles",
    "Topology",
    "WorkerContext",
    "batch_vars",
    "new_rendezvous_key",
    "worker_env",
]


@dataclass(frozen=True)
class Topology:
    """Where every worker of a job listens."""

    pserver_endpoints: Sequence[str]
    trainer_endpoints: Sequence[str]
    #: PaddlePaddle PS barriers: gloo HTTP store hosted beside pserver 0 (``host:port``).
    gloo_endpoint: str = ""
    #: Collective jobs (torch, paddle-collective): the rendezvous store, on trainer 0's host.
    master_endpoint: str = ""

    @classmethod
    def at_run_time(
        cls, pserver_ports: Sequence[int], trainer_ports: Sequence[int], *, gloo_port: int = 0,
        master: tuple[str, int] | None = None,
    ) -> Topology:  # fmt: skip
        """Endpoints whose hosts the workers resolve at run time (``runtime.endpoints``): ports the
        backend chose, hosts ``@<worker>@``; the gloo store beside pserver 0, the master on
        ``master`` = (worker, port) (default: trainer 0)."""
        ps = [f"{placeholder(f'pserver-{i}')}:{p}" for i, p in enumerate(pserver_ports)]
        tr = [f"{placeholder(f'trainer-{i}')}:{p}" for i, p in enumerate(trainer_ports)]
        gloo = f"{placeholder('pserver-0')}:{gloo_port}" if gloo_port and ps else ""
        who, port = master or ("trainer-0", trainer_ports[0] if trainer_ports else 0)
        return cls(ps, tr, gloo, f"{placeholder(who)}:{port}" if port else "")


@dataclass(frozen=True)
class JobFiles:
    input_dir: str = ""
    input: str = ""  # /pfs/... path
    output: str = ""  # /pfs/... path


@dataclass(frozen=True)
class ApiAccess:
    """How a job's workers reach the platform's API (its task master): URL, the job's token and, for
    an https URL the system does not trust, the CA bundle to verify it with."""

    url: str = ""
    token: str = ""
    ca: str = ""

    def __repr__(self) -> str:  # never print the token
        return f"ApiAccess(url={self.url!r}, token={'***' if self.token else ''!r}, ca={self.ca!r})"


@dataclass(frozen=True)
class WorkerContext:
    job_name: str
    user: str
    framework: str  # a paddlecloud.api.models.Framework value
    role: str  # "pserver" | "trainer"
    index: int
    topology: Topology
    output_dir: str
    restart: int = 0
    #: where the job's data lives: local directories and the PFS paths they are
    files: JobFiles = field(default_factory=lambda: JobFiles())
    gpus: Sequence[int] | None = None  # None: the backend has no GPUs to assign
    #: elastic jobs: (min, max) trainers; torch jobs then run trainers as torchrun agents
    trainer_range: tuple[int, int] | None = None
    user_env: dict[str, str] = field(default_factory=dict)
    api: ApiAccess = field(default_factory=lambda: ApiAccess())
    #: where the backend publishes the job's current membership (``runtime.membership``); "" none
    membership_file: str = ""
    #: endpoints resolved at run time: the job's directory (shared by its workers) where each
    #: publishes its host (``runtime.endpoints``); "": every endpoint is known at start
    endpoints_dir: str = ""
    #: elastic torch jobs: the job's key that signs its rendezvous state (``PADDLECLOUD_RDZV_KEY``,
    #: :func:`new_rendezvous_key`), kept by the backend with its record of the job
    rendezvous_key: str = field(default="", repr=False)  # never printed (nor is the token)

    @property
    def endpoint(self) -> str:
        eps = self.topology.pserver_endpoints if self.role == "pserver" else self.topology.trainer_endpoints
        return eps[self.index]


def new_rendezvous_key() -> str:
    """A job's rendezvous key (``WorkerContext.rendezvous_key``): 256 random bits, hex. A backend
    chooses it when the job starts and keeps it with its own record of the job, so that every trainer
    of the job gets the same one whenever it starts: a restart, a grow, after a server restart (the
    job token cannot serve: the server issues a fresh one at every start and re-adoption)."""
    return secrets.token_hex(32)


def _host_port(endpoint: str) -> tuple[str, str]:
    host, _, port = endpoint.rpartition(":")
    return host, port


def _platform(ctx: WorkerContext) -> dict[str, str]:
    host, port = _host_port(ctx.endpoint)
    t = ctx.topology
    return {
        c.JOB_NAME: ctx.job_name,
        c.JOB_USER: ctx.user,
        c.ROLE: ctx.role,
        c.WORKER: f"{ctx.role}-{ctx.index}",
        c.TRAINER_ID: str(ctx.index),
        c.TRAINERS: str(len(t.trainer_endpoints)),
        c.PSERVERS: str(len(t.pserver_endpoints)),
        c.PSERVER_ENDPOINTS: ",".join(t.pserver_endpoints),
        c.TRAINER_ENDPOINTS: ",".join(t.trainer_endpoints),
        c.CURRENT_ENDPOINT: ctx.endpoint,
        c.PORT: port,
        c.POD_IP: host,
        c.OUTPUT_DIR: ctx.output_dir,
        c.OUTPUT: ctx.files.output,
        c.CHECKPOINT_DIR: f"{ctx.output_dir}/checkpoints" if ctx.output_dir else "",
        c.INPUT_DIR: ctx.files.input_dir,
        c.INPUT: ctx.files.input,
        c.RESTART: str(ctx.restart),
        c.API: ctx.api.url,
        c.JOB_TOKEN: ctx.api.token,
        **({c.API_CA: ctx.api.ca} if ctx.api.ca else {}),
        c.MEMBERSHIP_FILE: ctx.membership_file,
        "PYTHONUNBUFFERED": "1",
    }


def _paddle_common(ctx: WorkerContext) -> dict[str, str]:
    host, port = _host_port(ctx.endpoint)
    t = ctx.topology
    return {
        "PADDLE_TRAINER_ENDPOINTS": ",".join(t.trainer_endpoints),
        "PADDLE_TRAINERS_NUM": str(len(t.trainer_endpoints)),
        "PADDLE_TRAINER_ID": str(ctx.index),
        "PADDLE_CURRENT_ENDPOINT": ctx.endpoint,
        "PADDLE_PORT": port,
        "POD_IP": host,
        # The seed's (PaddlePaddle v1) names, kept for old programs.
        "PADDLE_INIT_PORT": port,
        "PADDLE_INIT_TRAINER_ID": str(ctx.index),
        "PADDLE_INIT_TRAINER_COUNT": str(len(t.trainer_endpoints)),
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": str(len(t.trainer_endpoints)),
        "PADDLE_INIT_PSERVERS": ",".join(_host_port(e)[0] for e in t.pserver_endpoints),
        "PADDLE_INIT_PORTS_NUM": "1",
        "PADDLE_INIT_USE_GPU": "1" if ctx.gpus else "0",
    }


def _paddle_ps(ctx: WorkerContext) -> dict[str, str]:
    env = _paddle_common(ctx)
    env.update(
        {
            "TRAINING_ROLE": "PSERVER" if ctx.role == "pserver" else "TRAINER",
            "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(ctx.topology.pserver_endpoints),
            "PADDLE_PSERVER_NUMS": str(len(ctx.topology.pserver_endpoints)),
            "PADDLE_WITH_GLOO": "1",
            "PADDLE_GLOO_RENDEZVOUS": "3",
            "PADDLE_GLOO_HTTP_ENDPOINT": ctx.topology.gloo_endpoint,
        }
    )
    return env


def _paddle_collective(ctx: WorkerContext) -> dict[str, str]:
    env = _paddle_common(ctx)
    env.update(
        {
            "TRAINING_ROLE": "TRAINER",
            "PADDLE_MASTER": ctx.topology.master_endpoint,
            "PADDLE_DISTRI_BACKEND": "nccl" if ctx.gpus else "gloo",
        }
    )
    return env


#: torchrun's c10d rendezvous settings for elastic jobs (``PET_RDZV_CONF``), measured with
#: bench/torch_recovery.py (a killed trainer: the survivors train again after 13-22 s with torch's
#: defaults and ``last_call_timeout=3``, ~6 s with these):
#: - ``is_host=false``: the store is the platform's ``rendezvous-0``, never an agent's;
#: - ``keep_alive_interval=1,keep_alive_max_attempt=3``: a killed agent stays a member of the
#:   completed round until its heartbeats are 3 s old (torch's default: 5 s x 3 = 15 s), and the
#:   survivors' next round cannot begin before; a live agent that missed 3 s of heartbeats is
#:   dropped from the round and joins the next one;
#: - ``last_call_timeout=1``: once a round has its minimum, wait 1 s more for others (torch's
#:   default 30 s; the restarted agent is usually waiting already);
#: - ``read_timeout=10``: after each round rank 0's agent publishes the workers' master address in
#:   the store and the others wait for it; when rank 0 is killed in between (the chaos test hit
#:   it), they would wait 60 s (torch's default) before failing with ``DistStoreError``, silent and
#:   out of the rendezvous meanwhile (their heartbeats stop), then be restarted by their OnFailure
#:   policy. 10 s bounds that; every other read of this store answers in milliseconds.
TORCH_RDZV_CONF = (
    "is_host=false,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3,read_timeout=10"
)


def _torch_elastic(ctx: WorkerContext, lo: int, hi: int) -> dict[str, str]:
    """torchrun reads its options from ``PET_*``: the entry is just ``torchrun train.py``. The
    rendezvous store is the platform's (``runtime.rendezvous`` on the master endpoint), never a
    trainer's; the rendezvous is c10d kept open when an agent fails (``runtime.torchelastic``);
    ``PADDLECLOUD_RDZV_KEY`` signs its state (an agent without it refuses to run);
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` lets new agents join a running job;
    ``TORCH_ELASTIC_WORKER_IDENTICAL`` (one worker per agent, one role) makes each agent compute its
    worker's rank from its own group rank instead of exchanging role infos through the store after
    every round (there rank 0's agent would wait ``read_timeout`` for the role info of an agent killed
    just after the round completed, then fail with ``DistStoreError``)."""
    return {
        "PET_NNODES": f"{lo}:{hi}",
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": torchelastic.BACKEND,
        "PET_RDZV_ENDPOINT": ctx.topology.master_endpoint,
        "PET_RDZV_ID": f"{ctx.user}-{ctx.job_name}",
        "PET_RDZV_CONF": TORCH_RDZV_CONF,
        "PET_MAX_RESTARTS": "1000",
        "PET_LOCAL_ADDR": _host_port(ctx.endpoint)[0],
        c.RDZV_KEY: ctx.rendezvous_key,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
    }


def _torch(ctx: WorkerContext) -> dict[str, str]:
    """A fixed-size job: ``python train.py`` reads the process group's variables (``env://``);
    ``torchrun train.py`` reads the same world from ``PET_*``, a static rendezvous of N nodes of one
    process each on the master endpoint (rank 0's agent hosts the store there and its worker uses
    the agent's), so both entries form one world of N (without them torchrun's defaults made each
    trainer a world of 1, every one training its own copy)."""
    if ctx.trainer_range is not None:
        return _torch_elastic(ctx, *ctx.trainer_range)
    host, port = _host_port(ctx.topology.master_endpoint)
    world, rank = str(len(ctx.topology.trainer_endpoints)), str(ctx.index)
    return {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "WORLD_SIZE": world,
        "RANK": rank,
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": rank,
        "PET_NNODES": world,
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": rank,
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": host,
        "PET_MASTER_PORT": port,
        "PET_MAX_RESTARTS": "0",  # a failed trainer is the platform's to restart (--restart-policy)
    }


_FRAMEWORK = {
    "paddle-ps": _paddle_ps,
    "paddle-collective": _paddle_collective,
    "torch": _torch,
}


def worker_env(ctx: WorkerContext) -> dict[str, str]:
    """The variables a worker gets (not including the inherited ``PATH`` and friends)."""
    env = _platform(ctx)
    framework = _FRAMEWORK.get(ctx.framework)
    if framework is not None:
        env.update(framework(ctx))
    if ctx.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in ctx.gpus)
        env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] or "none"
    env.update(ctx.user_env)
    if ctx.endpoints_dir:
        env[c.ENDPOINTS_DIR] = ctx.endpoints_dir
        env[c.ENDPOINTS_WAIT] = ",".join(_waits_for(ctx, env))
    return env


def _waits_for(ctx: WorkerContext, env: dict[str, str]) -> list[str]:
    """The workers whose hosts this one must know before its program starts: every one named in
    its variables, but never a trainer for a pserver (trainers start once pservers listen) nor for
    a trainer of an elastic job (trainers come and go; they meet through the rendezvous)."""
    named = {m.group(1) for v in env.values() if "@" in v for m in PLACEHOLDER.finditer(v)}
    skip_trainers = ctx.role != "trainer" or ctx.trainer_range is not None
    me = f"{ctx.role}-{ctx.index}"
    return sorted(w for w in named if w != me and not (skip_trainers and w.startswith("trainer-")))


def batch_vars(assigned: int, bounds: tuple[int, int], init: int, lr_rule: str) -> dict[str, str]:
    """The variables of an adaptive-batch job's workers: the global batch ``assigned`` when the worker
    starts, the ``(min, max)`` bounds, the batch the job started with, its learning-rate rule."""
    return {
        c.BATCH_SIZE: str(assigned),
        c.BATCH_MIN: str(bounds[0]),
        c.BATCH_MAX: str(bounds[1]),
        c.BATCH_INIT: str(init),
        c.LR_RULE: lr_rule,
    }
