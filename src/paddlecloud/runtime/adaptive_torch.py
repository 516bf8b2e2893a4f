"""Adaptive batch size for a PyTorch DDP training loop (``AdaptiveDDP``); torch is imported on use.

    ada = AdaptiveDDP(model, optimizer, batch=32, max_local_batch=256)   # after init_process_group
    loader = DataLoader(data, batch_size=ada.micro_batch, sampler=sampler)
    for micro_batches in ada.group(loader):         # accum_steps micro-batches per optimizer step
        loss = ada.step(micro_batches, lambda b: loss_fn(model(b[0]), b[1]))   # mean loss of the step
        if ada.progress >= target: break            # progress: samples at the initial batch

At start (every membership change restarts torchrun's workers, so at every change) rank 0 reads the
assigned global batch and LR rule (``runtime.adaptive.read_assignment``: the API, else the env) and
broadcasts it: every rank trains at the same one. ``step`` runs the micro-batches (``no_sync`` but
for the last), measures the gradient at two batch sizes, sets the LR to ``lr x gain`` for the
optimizer step only (an LR scheduler keeps working on the base), and counts progress ``gain x
initial batch`` per step.

A new batch without a restart (the scheduler re-batches a job it keeps at its trainers): rank 0
polls the assignment (``GET …/adaptive`` every ``Options.poll_every`` s, in the background: a slow
or dead server never holds up a step) and puts the batch it last read into the every-``sync_every``
steps all-reduce; every replica gets the same sum, so all switch after the same step: the plan
(micro-batch, accumulation), the gain, the step-time window. Use ``batch_sampler(sampler)`` as the
DataLoader's ``batch_sampler`` (it reads the micro-batch at every batch) and ``group(loader)`` for
the accumulation: both follow the switch from the next step on, mid-epoch.

Where the two batch sizes come from (no extra pass over the data, no extra collective per step):

- several replicas: a DDP communication hook takes ``|g_local|²`` of each gradient bucket before the
  all-reduce and ``|g_global|²`` of the averaged one after it (local batch vs global batch);
- one replica: the first micro-batch of the accumulation against the whole local batch; without
  accumulation the step is run as two half micro-batches every ``Options.split_every`` steps.

Every ``Options.sync_every`` steps the replicas average their measurements in one small all-reduce,
so the EMA and the gain are identical everywhere (the models stay in step). Rank 0 reports the
estimate, its step time and the gain (``runtime.adaptive.Reporter``) when the job is adaptive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paddlecloud.runtime.adaptive import (
    Assignment,
    BatchSplit,
    JobApi,
    LiveBatchSampler,
    NoiseEstimator,
    Reporter,
    agreed,
    lr_gain,
    plan,
    proposed_batch,
    read_assignment,
    rebatch,
    sync_vector,
)

__all__ = ["AdaptiveDDP", "Options"]


@dataclass(frozen=True)
class Options:
    """Tuning of :class:`AdaptiveDDP`; the defaults suit most jobs."""

    #: the LR rule when the platform names none (a job not submitted as adaptive)
    lr_rule: str = "adascale"
    #: seconds between reports (the server keeps one per 5 s at most), and before the first
    report_every: float = 10.0
    first_report_after: float = 2.0
    #: steps between the replicas' averaging of their measurements and agreeing on the batch (one
    #: all-reduce of 4 numbers): a new batch applies at most this many steps after rank 0 read it
    sync_every: int = 10
    #: seconds between rank 0's reads of the assigned batch (``GET …/adaptive``, in the background)
    poll_every: float = 5.0
    #: EMA factor per measured step (0.99: about the last 100 steps count)
    smoothing: float = 0.99
    #: one replica without accumulation: measure by splitting every n-th step in two (0: never)
    split_every: int = 8
    #: steps at the start of a run left out of the step time (DDP's first steps build its buckets)
    warmup_steps: int = 3


class _Hook:
    """The DDP communication hook's state: squared norms of this step's buckets, local and averaged."""

    def __init__(self, dist: Any, world: int) -> None:
        self.dist, self.world = dist, world
        self.on = False
        self.local: list[Any] = []
        self.total: list[Any] = []

    def reset(self, on: bool) -> None:
        self.on, self.local, self.total = on, [], []

    def sums(self) -> tuple[float, float]:
        return sum(float(t) for t in self.local), sum(float(t) for t in self.total)


def _allreduce_measuring(state: _Hook, bucket: Any) -> Any:
    """DDP's default all-reduce (mean over replicas) that also takes the two squared norms."""
    buf = bucket.buffer()
    if state.on:
        state.local.append(buf.dot(buf))
    fut = state.dist.all_reduce(buf.div_(state.world), async_op=True).get_future()

    def averaged(f: Any) -> Any:
        out = f.value()[0]
        if state.on:
            state.total.append(out.dot(out))
        return out

    return fut.then(averaged)


def _nothing() -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def _rows(batch: Any) -> int:
    if isinstance(batch, Mapping):
        return len(next(iter(batch.values())))
    if isinstance(batch, list | tuple):
        return len(batch[0])
    return len(batch)


def _halves(batch: Any) -> list[Any]:
    """A micro-batch (a tensor, or a tuple / list / dict of tensors) cut in two along its rows."""
    h = _rows(batch) // 2
    if isinstance(batch, Mapping):
        return [{k: v[:h] for k, v in batch.items()}, {k: v[h:] for k, v in batch.items()}]
    if isinstance(batch, list | tuple):
        return [type(batch)(t[:h] for t in batch), type(batch)(t[h:] for t in batch)]
    return [batch[:h], batch[h:]]


class AdaptiveDDP:
    """Runs a DDP training loop at the global batch the scheduler assigns (see the module's doc).

    ``batch``: the initial global batch when the platform names none (a job run outside PaddleCloud);
    ``max_local_batch``: the most samples one replica computes at once (more: gradient accumulation);
    ``api``: the job's adaptive endpoints (default: from the env contract; None: never ask or report).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        batch: int = 32,
        max_local_batch: int | None = None,
        options: Options | None = None,
        api: JobApi | str | None = "env",
    ) -> None:
        self.torch = importlib.import_module("torch")
        dist = self.torch.distributed
        self.model, self.optimizer = model, optimizer
        self.options = options or Options()
        distributed = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size() if distributed else 1
        self.rank = dist.get_rank() if distributed else 0
        job_api = JobApi.from_env() if api == "env" else api if isinstance(api, JobApi) else None
        self.assignment = self._agree(read_assignment(job_api, None, batch, self.options.lr_rule))
        self.max_local = max_local_batch
        self.plan: BatchSplit = plan(self.assignment.batch_size, self.world, max_local_batch)
        self.estimator = NoiseEstimator(self.assignment.init, self.options.smoothing)
        self.gain = self._gain()
        #: samples trained, counted at the initial batch (``gain x init`` per full step)
        self.progress = 0.0
        #: optimizer steps over the job (kept in the checkpoint), and in this process
        self.steps = self._run_steps = 0
        self._times: list[float] = []
        self._hook = _Hook(dist, self.world)
        if self.world > 1 and hasattr(model, "register_comm_hook"):
            # DDP checks the hook's annotations against its own types (strings here: __future__)
            future = self.torch.futures.Future[self.torch.Tensor]
            _allreduce_measuring.__annotations__.update({"bucket": dist.GradBucket, "return": future})
            model.register_comm_hook(self._hook, _allreduce_measuring)
        self.reporter: Reporter | None = None
        self.poller: Reporter | None = None
        #: batch changes applied without a restart: (step, from, to)
        self.switches: list[tuple[int, int, int]] = []
        if job_api is not None and self.rank == 0 and self.assignment.adaptive:
            opts, read = self.options, job_api.state
            self.reporter = Reporter(job_api.report, opts.report_every, opts.first_report_after)
            self.poller = Reporter(lambda _: read(), opts.poll_every, opts.poll_every,
                                   what="reading the assigned batch")  # fmt: skip

    def _agree(self, mine: Assignment) -> Assignment:
        """Rank 0's assignment, everywhere (two ranks reading the API could see two assignments)."""
        if self.world == 1:
            return mine
        box = [dataclasses.asdict(mine)]
        self.torch.distributed.broadcast_object_list(box, src=0)
        return Assignment(**box[0])

    # --- what the loop reads ------------------------------------------------------------------------

    @property
    def micro_batch(self) -> int:
        """Rows per forward/backward pass of one replica (the DataLoader's batch size)."""
        return self.plan.micro

    @property
    def accum_steps(self) -> int:
        return self.plan.accum_steps

    @property
    def local_batch(self) -> int:
        return self.plan.local

    @property
    def global_batch(self) -> int:
        return self.plan.batch

    @property
    def noise_scale(self) -> float | None:
        return self.estimator.noise_scale

    def describe(self) -> str:
        a, p = self.assignment, self.plan
        noise = self.noise_scale
        return (
            f"global batch {p.batch} (assigned {a.batch_size} from the {a.source}, initial {a.init}, "
            f"{'adaptive ' + str(a.lo) + '..' + str(a.hi) if a.adaptive else 'fixed'}) on {p.replicas} "
            f"replicas: {p.accum_steps} x {p.micro} per replica; LR rule {a.lr_rule}, gain {self.gain:.3f}, "
            f"noise scale {'unknown' if noise is None else f'{noise:.0f}'}"
        )

    def batch_sampler(self, sampler: Iterable[int], drop_last: bool = False) -> LiveBatchSampler:
        """``DataLoader(data, batch_sampler=ada.batch_sampler(sampler))``: batches of the micro-batch
        in force when each is drawn (a new batch applies mid-epoch; with loader worker processes,
        from after the batches they have already prefetched)."""
        return LiveBatchSampler(sampler, lambda: self.plan.micro, drop_last)

    def group(self, loader: Iterable[Any]) -> Iterator[list[Any]]:
        """``loader``'s micro-batches in lists of ``accum_steps`` (the last list may be shorter); the
        count in force when each list is filled."""
        chunk: list[Any] = []
        for micro in loader:
            chunk.append(micro)
            if len(chunk) == self.plan.accum_steps:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    # --- one optimizer step -------------------------------------------------------------------------

    def step(self, micro_batches: Sequence[Any], loss_of: Callable[[Any], Any]) -> float:
        """Forward and backward every micro-batch (``loss_of(b)``: the mean loss over ``b``), measure,
        take the optimizer step at ``lr x gain``; returns the mean loss over the step's rows."""
        started = time.perf_counter()
        batches = list(micro_batches)
        single = self.world == 1
        split = single and len(batches) == 1 and self._split_due() and _rows(batches[0]) >= 2
        if split:
            batches = _halves(batches[0])
        measure = self.assignment.adaptive and (not single or len(batches) > 1)
        rows = [_rows(b) for b in batches]
        total = sum(rows)
        self._hook.reset(on=measure and not single)
        loss_sum, first = 0.0, 0.0
        for j, b in enumerate(batches):
            last = j == len(batches) - 1
            with self.model.no_sync() if not last and hasattr(self.model, "no_sync") else _nothing():
                loss = loss_of(b)
                (loss * (rows[j] / total)).backward()
            loss_sum += float(loss.detach()) * rows[j]
            if measure and single and j == 0:
                first = self._grad_sqr() * (total / rows[0]) ** 2
        if measure:
            self._measure(first, rows[0], total)
        self.steps += 1
        self._run_steps += 1
        proposal = self._sync() if self.steps % self.options.sync_every == 0 else 0
        self._optimizer_step()
        self.progress += self.gain * self.assignment.init * total / self.plan.local
        if self._run_steps > self.options.warmup_steps:
            self._times.append(time.perf_counter() - started)
        if self.reporter is not None:
            self.reporter.offer(self._report)
        if self.poller is not None:
            self.poller.offer(dict)
        new = rebatch(self.assignment, proposal)
        if new is not None:  # after this step's update, on every replica alike
            self._switch(new)
        return loss_sum / total

    def _split_due(self) -> bool:
        every = self.options.split_every
        return self.assignment.adaptive and every > 0 and self.steps % every == 0

    def _grad_sqr(self) -> float:
        torch = self.torch
        norms = [torch.linalg.vector_norm(p.grad) for p in self.model.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack(norms)) ** 2) if norms else 0.0

    def _measure(self, first: float, first_rows: int, total: int) -> None:
        if self.world == 1:
            small_sqr, small, big_sqr, big = first, first_rows, self._grad_sqr(), total
        elif self._hook.local and self._hook.total:
            (small_sqr, big_sqr), small, big = self._hook.sums(), total, total * self.world
        else:  # the hook did not run (a model that is not DDP): nothing measured
            return
        if 0 < small < big:
            self.estimator.measure(small_sqr, small, big_sqr, big)

    def _sync(self) -> int:
        """Average the replicas' windows and learn rank 0's batch proposal (one all-reduce), fold the
        windows into the EMA, update the gain; returns the agreed proposal (0: none)."""
        vector = sync_vector(self.estimator.window(), self._proposal(), self.rank)
        if self.world > 1 and self.assignment.adaptive:
            t = self.torch.tensor(vector, dtype=self.torch.float64)
            self.torch.distributed.all_reduce(t)
            vector = [float(v) for v in t]
        (sqr, var, steps), proposal = agreed(vector, self.world if self.assignment.adaptive else 1)
        self.estimator.update(sqr, var, steps)
        self.gain = self._gain()
        return proposal

    def _proposal(self) -> int:
        """Rank 0: the batch the server assigned when last read (0: not read yet, or not rank 0)."""
        return proposed_batch(self.poller.answer, self.world) if self.poller is not None else 0

    def _switch(self, new: Assignment) -> None:
        """Train at ``new`` from the next step on: its split, its gain; step times start afresh."""
        before = self.plan.batch
        self.assignment = new
        self.plan = plan(new.batch_size, self.world, self.max_local)
        self.gain = self._gain()
        self._times = []
        self.switches.append((self.steps, before, self.plan.batch))
        if self.rank == 0:
            print(
                f"paddlecloud.runtime.adaptive: global batch {before} -> {self.plan.batch} after step "
                f"{self.steps}, without a restart: {self.describe()}",
                flush=True,
            )

    def _gain(self) -> float:
        scale = self.plan.batch / self.assignment.init
        return lr_gain(self.assignment.lr_rule, scale, self.estimator.grad_sqr, self.estimator.grad_var)

    def _optimizer_step(self) -> None:
        groups = self.optimizer.param_groups
        base = [g["lr"] for g in groups]
        for g, lr in zip(groups, base, strict=True):
            g["lr"] = lr * self.gain
        try:
            self.optimizer.step()
        finally:
            for g, lr in zip(groups, base, strict=True):
                g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)

    def _report(self) -> dict[str, Any] | None:
        if not self._times:
            return None
        step_time = sum(self._times) / len(self._times)
        self._times = []
        return {
            "replicas": self.world,
            "local_bsz": float(self.plan.local),
            "step_time_s": step_time,
            "grad_sqr": self.estimator.grad_sqr,
            "grad_var": self.estimator.grad_var,
            # the wire takes gains >= 1; below 1 (a batch under the initial one) it is left out
            "lr_gain": self.gain if self.gain >= 1.0 else None,
            "batch_size": self.assignment.batch_size,
        }

    # --- checkpoints --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Progress and the noise estimate: keep it in the checkpoint beside the model's."""
        return {"progress": self.progress, "steps": self.steps, "estimator": self.estimator.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.progress = float(state["progress"])
        self.steps = int(state.get("steps", 0))
        self.estimator.load_state_dict(state["estimator"])
        self.gain = self._gain()

    def close(self) -> None:
        """Send the last report (bounded wait); the training goes on without it if the server is gone."""
        if self.reporter is not None:
            self.reporter.close()
        if self.poller is not None:
            self.poller.close(timeout=0.0)
