"""What the scheduler sees, for people: the cluster's nodes and the queue in scheduling order.

    ClusterState.cluster(who)       backend.nodes() + the placements of started jobs
                                    (capacity.node_states, as the reconciler computes them)
                                    ─▶ ClusterView (policy, nodes, totals, job counts)
    ClusterState.queue(who, user)   Queued job rows, ordered as the last scheduling cycle
                                    considered them (its plan's waits; jobs admitted in place of
                                    a preemption first; jobs newer than that cycle last)
                                    ─▶ QueueView (other users' jobs without name or message)

Read-only: a short database read and the backend's node list, no mutex (a view may be one cycle
behind). Served by ``GET /api/v1/cluster`` and ``/queue`` and the web console's pages.
"""

from __future__ import annotations

from sqlalchemy import select

from paddlecloud.api.cluster import Amounts, ClusterView, NodeView, QueueEntry, QueueView
from paddlecloud.backends.base import Capability
from paddlecloud.controller.loop.reconciler import HOLDING, Reconciler
from paddlecloud.controller.model.capacity import node_states
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.job_rows import job_request
from paddlecloud.controller.model.placement import placed
from paddlecloud.controller.model.views import ts
from paddlecloud.core.phases import JobPhase
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WaitReason
from paddlecloud.store.tables import JobRow

__all__ = ["ClusterState"]


def _amounts(r: Resources) -> Amounts:
    return Amounts(cpu_m=r.cpu_m, memory=r.memory, gpu=r.gpu)


class ClusterState:
    def __init__(self, ctx: Context, reconciler: Reconciler) -> None:
        self.ctx = ctx
        self.reconciler = reconciler

    @property
    def policy(self) -> str:
        return self.reconciler.policy.name

    def cluster(self, who: Identity) -> ClusterView:
        """Every node with its capacity and what is held on it (any user may look: no job of
        another user is named)."""
        del who  # any authenticated user
        backend = self.ctx.backend
        infos = backend.nodes()
        with self.ctx.session() as s:
            holding = s.scalars(select(JobRow).where(JobRow.phase.in_(HOLDING))).all()
            queued = len(s.scalars(select(JobRow.id).where(JobRow.phase == JobPhase.QUEUED)).all())
            states = node_states(self.ctx, holding, infos)
            workers: dict[str, int] = {}
            for row in holding:
                for p in placed(row):
                    workers[p.node] = workers.get(p.node, 0) + 1
        shared = Capability.SHARED_CAPACITY in backend.capabilities
        nodes = [
            NodeView(
                name=n.name,
                capacity=_amounts(st.capacity),
                allocated=_amounts(st.allocated),
                foreign=_amounts(n.foreign if shared else Resources()),
                workers=workers.get(n.name, 0),
                note=n.note,
            )
            for n, st in zip(infos, states, strict=True)
        ]
        return ClusterView(
            backend=backend.name,
            policy=self.policy,
            nodes=nodes,
            capacity=_amounts(sum((st.capacity for st in states), Resources())),
            allocated=_amounts(sum((st.allocated for st in states), Resources())),
            jobs_running=len(holding),
            jobs_queued=queued,
        )

    def queue(self, who: Identity, user: str | None = None) -> QueueView:
        """The waiting jobs in scheduling order (``user``: only that user's, keeping their places;
        a non-admin may name only themselves)."""
        if user and user != who.name:
            require_admin(who, "filtering the queue by another user")
        with self.ctx.session() as s:
            rows = s.scalars(
                select(JobRow).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
            ).all()
            requests = {}
            for row in rows:
                try:
                    requests[job_key(row.user, row.name)] = (
                        row,
                        job_request(row, specs=self.ctx.specs, engine=self.ctx.engine_units),
                    )
                except Exception:  # an unreadable spec: the reconciler fails the job next cycle
                    continue
        order = self._order()
        ranked = sorted(
            requests.values(),
            key=lambda rq: (
                rq[0].reason != WaitReason.PREEMPTION_IN_PROGRESS,  # admitted, waiting for a preemption
                order.get(job_key(rq[0].user, rq[0].name), len(order)),
                -rq[0].priority,
                rq[0].submitted_at,
                rq[0].id,
            ),
        )
        items = []
        for position, (row, req) in enumerate(ranked, start=1):
            if user and row.user != user:
                continue
            visible = who.is_admin or row.user == who.name
            submitted = ts(row.submitted_at)
            assert submitted is not None
            items.append(
                QueueEntry(
                    position=position,
                    name=row.name if visible else "",
                    user=row.user if visible else "",
                    mine=row.user == who.name,
                    priority=row.priority,
                    submitted_at=submitted,
                    pservers=req.pservers,
                    trainers=req.trainers,
                    trainer=_amounts(req.trainer),
                    reason=row.reason,
                    message=row.message if visible else "",
                )
            )
        return QueueView(policy=self.policy, items=items)

    def _order(self) -> dict[str, int]:
        """Job key -> rank among the last cycle's waits, in the order the policy decided them (the
        policies consider waiting jobs in their order: priority, service, fair share, age)."""
        last = self.reconciler.last_round
        order: dict[str, int] = {}
        for w in last[1].wait if last is not None else ():
            order.setdefault(w.job, len(order))
        return order
