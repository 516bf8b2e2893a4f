"""scheduler.pool: the bucketed node index answers every query as a scan over the nodes would.

Random changes (take, give, bounce, exact takes) inside committed and rolled-back trials; after each,
every query is compared with a plain scan of per-node state kept beside the pool.
"""

from __future__ import annotations

import random

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.pool import Key, NodePool, how_many
from paddlecloud.scheduler.snapshot import NodeState

GI = 2**30
SHAPES = [(1000, GI, 1), (2000, 4 * GI, 2), (500, GI, 0), (4000, 8 * GI, 0), (0, 0, 1), (0, 0, 0)]


def _nodes(rng: random.Random, n: int) -> tuple[NodeState, ...]:
    out = []
    for i in range(n):
        g = rng.choice((0, 4, 8))
        cap = Resources(rng.choice((8000, 16000)), rng.choice((16, 32)) * GI, g)
        used = rng.randrange(0, g + 1) if g else 0
        out.append(NodeState(f"n{i}", cap, Resources(used * 1000, used * GI, used), tuple(range(used, g))))
    return tuple(out)


def _rank(key: Key, c: int, m: int, g: int, count: int) -> tuple[tuple[int, ...], int]:
    fits = min(key[0] // c if c else count, key[1] // m if m else count, key[2] // g if g else count, count)
    return (1 if g == 0 and key[3] else 0, -fits, -key[0], -key[1]), fits


def _check(pool: NodePool) -> None:
    n = len(pool.names)
    for c, m, g in SHAPES:
        room = [i for i in range(n) if pool.fits_at(i, c, m, g)]
        assert pool.first_fit(c, m, g) == (room[0] if room else None)
        live = pool.hints[pool.cut :]
        expect = next((i for i in reversed(live) if pool.fits_at(i, c, m, g)), None)
        assert pool.newest_hint(c, m, g) == expect
        can = [how_many(pool.cpu[i], pool.mem[i], pool.gpu[i], c, m, g) for i in range(n)]
        for want in (1, 3, 10, 40):
            assert pool.holds(c, m, g, want) == (sum(can) >= want)
        sole = pool.sole_fit(c, m, g)
        assert sole is None or (room == [sole] and sole == pool.hints[-1])
        keyed = sorted(room, key=lambda i, c=c, m=m, g=g: (_rank(pool.keys[i], c, m, g, 5)[0], i))
        got = pool.gang(c, m, g, 5, lambda k, c=c, m=m, g=g: _rank(k, c, m, g, 5))
        assert [i for i, _ in got] == keyed[: len(got)]
        fullest = sorted(room, key=lambda i: (-can[i], i))
        assert [i for i, _ in pool.gang(c, m, g, 5)] == fullest[: len(pool.gang(c, m, g, 5))]
    assert (pool.tcpu, pool.tmem, pool.tgpu) == (sum(pool.cpu), sum(pool.mem), sum(pool.gpu))
    for i in range(n):
        assert i in pool.buckets[pool.keys[i]].nodes
        assert pool.keys[i] == (pool.cpu[i], pool.mem[i], pool.gpu[i], bool(pool.gpus[i]))
        assert pool.filed[i] == pool.stamp[i]
        assert (pool.stamp[i] in pool.buckets[pool.keys[i]].stamps) == (pool.stamp[i] >= 0)


def _state(pool: NodePool) -> tuple[object, ...]:
    pool.sync()
    buckets = {k: (list(b.nodes), list(b.stamps)) for k, b in pool.buckets.items()}
    free = (list(pool.cpu), list(pool.mem), list(pool.gpu), [list(g) for g in pool.gpus])
    return (*free, list(pool.hints), list(pool.stamp), buckets)


def _change(rng: random.Random, pool: NodePool) -> None:
    c, m, g = rng.choice(SHAPES)
    op = rng.randrange(6)
    if op == 0:
        i = pool.first_fit(c, m, g)
        if i is not None:
            pool.take(i, c, m, g, g, 1)
    elif op == 1:
        i = rng.randrange(len(pool.names))
        pool.give(i, c, m, g, [tuple(range(100 + i, 100 + i + g))], hint=rng.random() < 0.8)
    elif op == 4:
        i = pool.newest_hint(c, m, g)
        if i is not None:
            pool.take_one(i, c, m, g)
    elif op == 5:
        i = rng.randrange(len(pool.names))
        pool.give_one(i, c, m, g, tuple(range(200 + i, 200 + i + g)))
    elif op == 2:
        i = rng.randrange(len(pool.names))
        pool.bounce(i, min(g, len(pool.gpus[i])))
    else:
        i = rng.randrange(len(pool.names))
        if pool.gpus[i]:
            pool.take_exact(i, 0, 0, 1, [pool.gpus[i][-1]])


@pytest.mark.parametrize("seed", range(8))
def test_queries_match_a_scan_through_changes_and_trials(seed: int) -> None:
    rng = random.Random(seed)
    pool = NodePool(_nodes(rng, rng.choice((1, 5, 30))))
    _check(pool)
    for _ in range(40):
        if rng.random() < 0.3:
            before = _state(pool)
            pool.begin()
            for _ in range(rng.randrange(1, 6)):
                _change(rng, pool)
                _check(pool)
            if rng.random() < 0.5:
                pool.rollback()
                assert _state(pool) == before
            else:
                pool.commit(keep_hints=rng.choice((None, 3)))
        else:
            _change(rng, pool)
        _check(pool)


def test_take_many_is_taking_one_at_a_time() -> None:
    node = NodeState("n", Resources(8000, 8 * GI, 8), Resources(), (3, 1, 4, 0, 5, 2, 6, 7))
    one, many = NodePool((node,)), NodePool((node,))
    singles = [one.take(0, 1000, GI, 2, 2)[0] for _ in range(3)]
    assert many.take(0, 1000, GI, 2, 2, 3) == singles == [(3, 1), (4, 0), (5, 2)]
    assert _state(one) == _state(many)
    for p in (one, many):
        assert p.gpus[0] == [6, 7] and p.gpu[0] == 2
    for gpus in singles:
        one.give(0, 1000, GI, 2, [gpus], hint=True)
    many.give(0, 1000, GI, 2, singles, hint=True)
    assert _state(one) == _state(many)
    assert many.gpus[0] == [6, 7, 3, 1, 4, 0, 5, 2] and many.hints == [0, 0, 0]


def test_how_many_ignores_dimensions_a_worker_does_not_need() -> None:
    assert how_many(4000, -1, 0, 1000, 0, 0) == 4  # memory overcommitted, but not needed
    assert how_many(4000, 8 * GI, 2, 1000, GI, 1) == 2
    assert how_many(-1000, 8 * GI, 2, 1000, GI, 1) == 0
    assert how_many(1, 1, 1, 0, 0, 0) == 1 << 30
    assert how_many(0, 1 << 40, 0, 0, 1, 0) == 1 << 40


@pytest.mark.parametrize("exact", [(), (5,), (1, 7)])
def test_bounce_is_taking_and_giving_back(exact: tuple[int, ...]) -> None:
    node = NodeState("n", Resources(8000, 8 * GI, 4), Resources(4000, 4 * GI, 4), (3, 5, 1, 7))
    stepwise, at_once = NodePool((node,)), NodePool((node,))
    if exact:
        stepwise.take_exact(0, 1000, GI, len(exact), exact)
        stepwise.give(0, 1000, GI, len(exact), [exact], hint=True)
    else:
        (got,) = stepwise.take(0, 1000, GI, 2, 2)
        stepwise.give(0, 1000, GI, 2, [got], hint=True)
    at_once.bounce(0, 0 if exact else 2, exact)
    assert _state(stepwise) == _state(at_once)


def test_one_worker_steps_are_the_general_ones() -> None:
    node = NodeState("n", Resources(8000, 8 * GI, 8), Resources(), (3, 1, 4, 0, 5, 2, 6, 7))
    general, one = NodePool((node,)), NodePool((node,))
    for g in (1, 2, 0):
        (got,) = general.take(0, 1000, GI, g, g)
        assert one.take_one(0, 1000, GI, g) == got
        assert _state(general) == _state(one)
    for gpus in ((9,), (), (4, 0)):
        general.give(0, 1000, GI, len(gpus), [gpus], hint=True)
        one.give_one(0, 1000, GI, len(gpus), gpus)
        assert _state(general) == _state(one)


def test_sole_fit_answers_only_when_one_node_can_have_room() -> None:
    full = Resources(8000, 8 * GI, 8)
    nodes = tuple(NodeState(f"n{i}", full, full, ()) for i in range(4))
    pool = NodePool(nodes)
    assert pool.sole_fit(1000, GI, 1) is None  # no hint yet
    pool.give(2, 1000, GI, 1, [(5,)], hint=True)
    assert pool.sole_fit(1000, GI, 1) == 2 == pool.first_fit(1000, GI, 1)
    assert pool.sole_fit(2000, GI, 1) is None  # it has no room there
    pool.give(0, 1000, GI, 1, [(6,)], hint=False)  # room on two nodes: the totals cannot tell
    assert pool.sole_fit(1000, GI, 1) is None
    over = NodeState("x", full, Resources(9000, 8 * GI, 8), ())  # overcommitted: totals mislead
    pool = NodePool((*nodes, over))
    pool.give(1, 1000, GI, 1, [(5,)], hint=True)
    pool.give(3, 1000, GI, 1, [(5,)], hint=False)
    assert pool.tcpu < 2 * 1000 and pool.sole_fit(1000, GI, 1) is None


def test_first_fit_remembers_only_while_no_node_got_room() -> None:
    full, half = Resources(8000, 8 * GI, 8), Resources(4000, 4 * GI, 4)
    pool = NodePool(tuple(NodeState(f"n{i}", full, half if i == 2 else full, ()) for i in range(4)))
    assert pool.first_fit(1000, GI, 1) == 2
    pool.take(2, 1000, GI, 1, 0, 3)
    assert pool.first_fit(1000, GI, 1) == 2  # still room there, none elsewhere
    pool.give(0, 1000, GI, 1, [()])  # a lower node got room
    assert pool.first_fit(1000, GI, 1) == 0
    pool.take(0, 1000, GI, 1, 0)
    pool.take(2, 1000, GI, 1, 0)
    assert pool.first_fit(1000, GI, 1) is None


def test_newest_hint_looks_past_the_recent_ones() -> None:
    full = Resources(8000, 8 * GI, 8)
    pool = NodePool(tuple(NodeState(f"n{i}", full, full, ()) for i in range(20)))
    assert pool.newest_hint(1000, GI, 1) is None  # no hint at all
    pool.give(0, 1000, GI, 1, [(5,)], hint=True)
    pool.hint(list(range(1, 20)))  # newer hints, on nodes without room
    assert len(pool.hints) > 16 and pool.newest_hint(1000, GI, 1) == 0


@pytest.mark.parametrize("free", [(), (2,), (2, 6)])
@pytest.mark.parametrize("trial", [False, True])
def test_swap_one_is_giving_one_back_and_taking_one(free: tuple[int, ...], trial: bool) -> None:
    """On a node with ``free`` GPUs left: the same free capacity, GPU list, hints, stamps and
    ``roomier`` as ``give_one`` then ``take_one``, and the same after a rollback of either."""
    used = 8 - len(free)
    node = NodeState("n", Resources(8000, 8 * GI, 8), Resources(1000 * used, GI * used, used), free)
    for g, gpus in ((1, (5,)), (2, (4, 0)), (0, ())):
        stepwise, at_once = NodePool((node,)), NodePool((node,))
        if trial:
            stepwise.begin()
            at_once.begin()
        stepwise.give_one(0, 1000, GI, g, gpus)
        got = stepwise.take_one(0, 1000, GI, g)
        assert at_once.swap_one(0, 1000, GI, g, gpus) == got
        assert (_state(stepwise), stepwise.roomier) == (_state(at_once), at_once.roomier)
        if trial:
            stepwise.rollback()
            at_once.rollback()
            assert (_state(stepwise), stepwise.roomier) == (_state(at_once), at_once.roomier)
