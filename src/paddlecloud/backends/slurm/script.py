"""What one run of a worker is submitted to Slurm as: its ``sbatch`` arguments, the batch script's
command and its environment (docs/slurm.md).

    SlurmBackend._submit ──BatchScripts.sbatch(job, worker, topology)──▶ (argv, env) ──▶ sbatch
        argv: --job-name pc-<user>-<job>-<worker>-r<run>, --comment paddlecloud:<key>, -n1 -c CPUS
              --mem M [--gres=gpu:N] [--nodelist NODE] [--partition/--account/--qos], site args,
              --wrap "exec COMMAND"
        COMMAND: the launcher (``python -m paddlecloud.runtime.launcher``; where runs fence
              themselves, under the node's run monitor, ``node.monitor --fence-api ...``), or with
              a sandbox the node-side jail (``jail.py``) reading the spec written here, which
              starts the monitor and the launcher;
              for a job with a SampleSet, preceded by ``samplenode run`` (mounts it read-only on the
              node for this run at PADDLECLOUD_SAMPLESET_DIR, then runs the rest, then unmounts)
        env:  the env contract (``core.envcontract``) over the launcher's or the sandbox's base

The exit status of each run is written by its launcher to :func:`status_file`.
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import RENDEZVOUS
from paddlecloud.backends.local.image_prep import image_worker_env
from paddlecloud.backends.local.keeper import api_target
from paddlecloud.backends.local.sandbox import (
    API_SOCKET,
    JobJail,
    Sandbox,
    WorkerDirs,
    worker_base_env,
)
from paddlecloud.backends.samplesets import SAMPLESET_DIR_ENV
from paddlecloud.backends.slurm.jail import JailSpec
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord, slug
from paddlecloud.backends.slurm.nodekeep import NETNS_PREFIX, RunKeep
from paddlecloud.backends.slurm.samplesets import SlurmSampleSets
from paddlecloud.backends.slurm.settings import SlurmSettings
from paddlecloud.backends.start_sequence import SERVER_ROLES
from paddlecloud.core.envcontract import Topology, WorkerContext, worker_env
from paddlecloud.core.netaddr import host_of, is_loopback
from paddlecloud.core.resources import Resources
from paddlecloud.node import monitor
from paddlecloud.runtime import contract
from paddlecloud.runtime.launcher import PORT_FREE
from paddlecloud.runtime.torchelastic import RUN_TAG_VAR

__all__ = [
    "DEFAULT_NEED",
    "MIB",
    "BatchScripts",
    "command",
    "log_file",
    "port_free_file",
    "ready_file",
    "status_file",
]

MIB = 1024 * 1024
#: what a worker needs when the launch does not say (one CPU, 512 MiB)
DEFAULT_NEED = Resources(cpu_m=1000, memory=512 * MIB)


@dataclass(frozen=True)
class BatchScripts:
    """The submissions of one backend: its settings, the runtime shim's folder (``PYTHONPATH`` of
    job environments) and its sandbox (None: isolation none)."""

    settings: SlurmSettings
    pythonpath: Path
    sandbox: Sandbox | None
    #: the SampleSets (a job with one mounts it on the node for each run; None: not offered)
    samplesets: SlurmSampleSets | None = None
    #: sandboxed jobs get a network namespace per host (``nodekeep.py``); False: the node's network
    network: bool = False
    #: every node's address by name (Slurm's NodeAddr): the hosts a job's VXLAN floods to
    addresses: Callable[[], Mapping[str, str]] = field(default=dict)
    #: seconds a kept run may hear neither the API nor the Slurm controller before it ends itself
    #: (``node.fence``; 0: never)
    fence_after: Callable[[], int] = field(default=lambda: 0)

    @property
    def kept(self) -> bool:
        """Runs are started by their monitor on the node (sandboxed): servers mark themselves ready
        (``ready_file``), the log is capped, the job has its network."""
        return self.sandbox is not None

    def netns(self, job: JobRecord) -> str:
        """The job's network namespace on each of its hosts ("" : the nodes' network)."""
        if not (self.network and self.kept):
            return ""
        ident = f"{self.settings.root}\0{job.launch.key}"
        return NETNS_PREFIX + hashlib.sha256(ident.encode()).hexdigest()[:16]

    def sbatch(self, job: JobRecord, w: WorkerRecord, topology: Topology) -> tuple[list[str], dict[str, str]]:
        launch, s = job.launch, self.settings
        need = launch.resources.get(w.role, DEFAULT_NEED)
        cwd = job.dir / "workers" / w.name
        if not cwd.exists():
            shutil.copytree(job.dir / "package", cwd, symlinks=True)
        ref = launch.sampleset if w.role != RENDEZVOUS else None  # the store reads no data
        run = self.samplesets.run_name(launch.user, launch.name, w.name, w.run) if self.samplesets else ""
        sampleset = self.samplesets.paths.mountpoint(run) if ref is not None and self.samplesets else None
        command, base = self._wrap(job, w, cwd, gpus=need.gpu > 0, sampleset=sampleset)
        if sampleset is not None and ref is not None and self.samplesets is not None:
            # mounted on the node for this run before the worker starts (samplenode.py)
            command = self.samplesets.worker_command(ref, run, status_file(job, w), command)
            base[SAMPLESET_DIR_ENV] = str(sampleset)
        argv = [
            f"--job-name=pc-{slug(launch.user)}-{slug(launch.name)}-{w.name}-r{w.run}",
            f"--comment=paddlecloud:{launch.key}",
            f"--chdir={cwd}",
            f"--output={log_file(job, w)}",
            "--open-mode=append",
            "--ntasks=1",
            f"--cpus-per-task={max(1, math.ceil(need.cpu_m / 1000))}",
            f"--mem={max(1, math.ceil(need.memory / MIB))}M",
            "--no-requeue",
            *([f"--nodelist={w.node}"] if w.node else []),
            *([f"--gres=gpu:{need.gpu}"] if need.gpu else []),
            *s.site_args(launch.user),
            f"--wrap=exec {shlex.join(command)}",
        ]
        # gpus: how many (the framework's settings); Slurm picks which (CUDA_VISIBLE_DEVICES below)
        ctx = WorkerContext(
            job_name=launch.name, user=launch.user, framework=launch.framework, role=w.role, index=w.index,
            topology=topology, output_dir=str(launch.output_dir), restart=w.run, files=launch.files,
            gpus=tuple(range(need.gpu)) if need.gpu else None, trainer_range=launch.trainer_range,
            user_env=launch.env, api=launch.api,
            membership_file=str(job.dir / "contract" / "membership.json"),
            rendezvous_key=job.rendezvous_key,
        )  # fmt: skip
        env = {**base, **worker_env(ctx)}
        if w.role in SERVER_ROLES:  # checked bindable on the node by the launcher (PortHeld)
            env[contract.LISTEN_PORT] = str(w.port)
        if need.gpu:  # Slurm sets them to the GPUs it gives the job (GRES), whatever the indices here
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env.pop("NVIDIA_VISIBLE_DEVICES", None)
        return argv, env

    def _wrap(
        self, job: JobRecord, w: WorkerRecord, cwd: Path, *, gpus: bool, sampleset: Path | None
    ) -> tuple[list[str], dict[str, str]]:
        """The batch script's command for this run of ``w`` and its environment before the env
        contract: the launcher, or with a sandbox the node-side jail (``jail.py``) that starts it
        (binding ``sampleset``, the run's SampleSet mount, read-only)."""
        s = self.settings
        status = status_file(job, w)
        shutil.rmtree(status.parent, ignore_errors=True)
        status.parent.mkdir(parents=True)
        tag = uuid.uuid4().hex  # tells torch's elastic agents apart (runtime.torchelastic)
        launcher = ["-m", "paddlecloud.runtime.launcher", "--status", str(status), "--cwd", str(cwd),
                    command(w, job.launch.entry)]  # fmt: skip
        common = {RUN_TAG_VAR: tag, **{k: v for k, v in os.environ.items() if k.startswith("SLURM_CONF")}}
        jail = self.jail(job)
        if jail is None:
            bins = [f"{job.env_dir}/bin"] if job.env_dir else []
            env = {
                "PATH": ":".join([*bins, os.path.dirname(s.python), os.environ.get("PATH", "/usr/bin:/bin")]),
                **({"PYTHONPATH": str(self.pythonpath)} if job.env_dir else {}),
                "HOME": str(cwd),
                "LANG": os.environ.get("LANG", "C.UTF-8"),
            }
            return [*self._fence_only(job, w), s.python, *launcher], {**env, **common}
        dirs = WorkerDirs(cwd=cwd, status=status.parent, tmp=job.dir / "tmp" / w.name,
                          hostname=f"{w.name}-{tag[:8]}", sampleset=sampleset)  # fmt: skip
        spec = job.dir / "run" / f"{w.name}.{w.run}.jail.json"
        keep = self._keep(job, w)
        JailSpec.of(jail, dirs, launcher, gpus=gpus, keep=keep).write(spec)
        env = worker_base_env(
            os.environ, (), sandboxed=True, env_dir=jail.env_dir, shim=self.pythonpath, user=job.launch.user
        )
        if jail.image is not None:
            env = image_worker_env(env, job.image_env)
        env.update(common)
        if keep.netns and keep.api_target:  # the API, relayed into the job's namespace
            env[contract.API_SOCKET] = API_SOCKET
        return [s.python, "-I", "-m", "paddlecloud.backends.slurm.jail", str(spec)], env

    def _fence(self, job: JobRecord) -> tuple[str, int, str]:
        """How a run of the job fences itself on a node cut off (``node.fence``): the API's
        ``HOST:PORT``, the seconds, ``scontrol``'s path; ("", 0, "") where it does not (a loopback
        API, the emulated cluster: no link to lose; no ``scontrol`` here; fencing off)."""
        api = api_target(job.launch.api.url)
        scontrol = shutil.which("scontrol") or ""
        if not api or is_loopback(host_of(api)) or not scontrol:
            return "", 0, ""
        after = self.fence_after()
        return (api, after, scontrol) if after > 0 else ("", 0, "")

    def _fence_only(self, job: JobRecord, w: WorkerRecord) -> list[str]:
        """An unsandboxed run's monitor, only where it fences: the run's log through it (sbatch's
        ``--output`` too, as for a sandboxed run), its status written when the fence ends it;
        [] where there is no fence (the launcher then runs alone)."""
        api, after, scontrol = self._fence(job)
        if not api:
            return []
        own = ["--log", str(log_file(job, w)), "--status", str(status_file(job, w))]
        fence = ["--fence-api", api, "--fence-scontrol", scontrol, "--fence-after", str(after)]
        # built here, run there: the node's interpreter finds the package itself (``-m``), where
        # ``monitor.command()`` would name this host's folder of it
        python = self.settings.python
        start = ["/usr/bin/env", "--ignore-signal=TERM,INT", python, "-I", "-m", monitor.__name__]
        return [*start, *own, *fence, "--"]

    def _keep(self, job: JobRecord, w: WorkerRecord) -> RunKeep:
        """What the node keeps for this run besides its sandbox (``nodekeep.py``)."""
        limits, name = self.settings.limits, self.netns(job)
        server = w.role in SERVER_ROLES
        api = api_target(job.launch.api.url)
        fence, after, scontrol = self._fence(job)
        return RunKeep(
            log=str(log_file(job, w)), max_log_bytes=limits.max_log_bytes,
            max_pids=limits.max_pids if limits.resources != "off" else None, netns=name, vni=job.vni,
            addresses=dict(self.addresses()) if name else {}, api_target=api,
            api_dir=str(self.settings.node_cache / "run"), ready_port=w.port if server else 0,
            ready_file=str(ready_file(job, w)) if server else "",
            fence_api=fence, fence_after_s=after, fence_scontrol=scontrol,
        )  # fmt: skip

    def jail(self, job: JobRecord) -> JobJail | None:
        """What the job's workers are confined to (None: isolation none); without requirements.txt
        its environment is the launcher's Python (``SlurmSettings.python``: the same path on every node)."""
        if self.sandbox is None:
            return None
        python = self.settings.python
        prefix = (
            Path(sys.prefix) if python == sys.executable else Path(python).parent.parent
        )  # PREFIX/bin/python
        env_dir = Path(job.env_dir) if job.env_dir else prefix
        return self.sandbox.jail(job.launch, env_dir, shared=(job.dir / "contract",), image=job.image)


def log_file(job: JobRecord, w: WorkerRecord) -> Path:
    """This run's log (sbatch's ``--output``; the monitor writes into it too), kept across restarts."""
    return job.dir / "logs" / f"{w.name}.{w.run}.log"


def status_file(job: JobRecord, w: WorkerRecord) -> Path:
    """Where this run's launcher writes its exit status (its folder is bound into a sandbox)."""
    return job.dir / "run" / f"{w.name}.{w.run}" / "exit.json"


def port_free_file(job: JobRecord, w: WorkerRecord) -> Path:
    """Where this run's launcher says the server's port was free on its node when the program
    started (``runtime.launcher.PORT_FREE``): unsandboxed, a listener there is then the server's."""
    return status_file(job, w).with_name(PORT_FREE)


def ready_file(job: JobRecord, w: WorkerRecord) -> Path:
    """Where the monitor of a server's run (pserver, store) marks that it listens (the job's
    ``run/``, on the shared directory: the server reads it)."""
    return job.dir / "run" / f"{w.name}.{w.run}.ready"


def command(w: WorkerRecord, entry: str) -> str:
    """What the worker runs: the job's entry, or the platform's store for the rendezvous."""
    return f"python -m paddlecloud.runtime.rendezvous {w.port} 0.0.0.0" if w.role == RENDEZVOUS else entry
