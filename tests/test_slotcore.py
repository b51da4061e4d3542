"""The projection and encoding kernels (mabp_gym.core.kernels.slotcore): the same run
with numba and without it (the kernels then run as plain Python), and the stable sort they
use. Every slot's control and observation is held to golden digests in
``test_slot_golden.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mabp_gym.core.kernels import slotcore

_TRAJECTORY = """
import sys
{block}
from mabp_gym import Simulator, make_workload
from mabp_gym.core.kernels import jit
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.agents import make_policy
wl = make_workload("mixed")
sim = Simulator(wl)
sim.reset(6)
encoder, policy = ObservationEncoder(wl), make_policy("mabp", wl)
rows = []
for _ in range(150):
    control, out = sim.step_scores(policy.scores(encoder.encode(sim.state)))
    rows.append((out.backlog, out.delays, out.generated, control.route.tolist()))
print(jit.COMPILED, hash(repr(rows)))
"""


def test_slotcore__without_numba_the_kernels_run_as_python_and_give_the_same_run():
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parent.parent)

    def run(block: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-c", _TRAJECTORY.format(block=block)],
            capture_output=True,
            text=True,
            cwd=root,
            check=True,
            env={"PYTHONPATH": root, "PYTHONHASHSEED": "0", "PATH": ""},
        )
        return result.stdout.split()

    # sys.modules["numba"] = None makes "import numba" fail as if it were not installed.
    without = run('sys.modules["numba"] = None')
    with_numba = run("")
    assert without[0] == "False" and with_numba[0] == "True"
    assert without[1] == with_numba[1]


def _descending(block, live, radix):
    """The sort with fresh scratch (as long as the kernel's: twice the candidates)."""
    n = block.shape[0]
    key, order = np.empty(2 * n), np.empty(2 * n, dtype=np.int64)
    start, count = slotcore._descending(
        block, live, radix, key, order, np.empty(256, dtype=np.int64)
    )
    return order[start : start + count]


def test_descending__is_numpys_stable_argsort_of_the_negated_scores():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        block = np.round(rng.uniform(-1, 1, int(rng.integers(1, 200))), 1)  # many ties
        live = block > 0
        wanted = np.flatnonzero(live)
        expected = wanted[np.argsort(-block[wanted], kind="mergesort")]
        for radix in (None, True):
            assert np.array_equal(_descending(block, live, radix), expected)


def test_descending__by_rank_and_by_merge_on_either_side_of_the_rank_limit():
    # Up to _RANK_UP_TO live candidates each is placed at its rank, past it they merge:
    # the same stable order at the counts around that line, with ties and without.
    rng = np.random.default_rng(2)
    limit = slotcore._RANK_UP_TO
    for n in (0, 1, 2, limit - 1, limit, limit + 1, 2 * limit + 3):
        for values in (np.round(rng.uniform(0.01, 1, n), 1), rng.uniform(0.01, 1, n)):
            live = values > 0  # rounding leaves a few at zero
            wanted = np.flatnonzero(live)
            expected = wanted[np.argsort(-values[wanted], kind="stable")]
            for radix in (None, True):
                assert np.array_equal(_descending(values, live, radix), expected), n


def test_descending__by_radix_from_many_candidates_on_the_same_order():
    # From _RADIX_FROM live candidates on the order comes from a radix sort of the values'
    # bits: the same order, ties in index order, for values of any magnitude (subnormal to
    # huge, shared and distinct bytes) and queues that leave some positive scores dead.
    rng = np.random.default_rng(1)
    start = slotcore._RADIX_FROM
    for n in (start - 1, start, start + 1, 3 * start, 20_000):
        for values in (
            np.round(rng.uniform(-1, 1, n), 2),
            rng.choice([5e-324, 1e-300, 0.25, 0.5, 1.0, 3.0, 7e10, -2.0, 0.0], n),
            rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n),
        ):
            live = (values > 0) & (rng.random(n) < 0.9)
            wanted = np.flatnonzero(live)
            expected = wanted[np.argsort(-values[wanted], kind="stable")]
            # radix=None (a network too small for it) merges whatever the count.
            for radix in (True, None):
                assert np.array_equal(_descending(values, live, radix), expected), n


def test_radix_sort__only_where_one_sort_can_see_enough_candidates_for_it():
    # The transfers are sorted all together, the service and routing candidates node by
    # node: the radix branch is compiled only where one of those can reach _RADIX_FROM.
    from types import SimpleNamespace

    from mabp_gym.core.workloads import make_workload

    assert slotcore.radix_sort(make_workload("mixed").index) is None
    start = slotcore._RADIX_FROM

    def index(actions_at, routes_at, transfers, nodes=3):
        action_node = np.concatenate([np.full(k, i) for i, k in enumerate(actions_at)])
        route_node = np.concatenate([np.full(k, i) for i, k in enumerate(routes_at)])
        return SimpleNamespace(
            num_nodes=nodes,
            num_transfers=transfers,
            action_node=action_node.astype(np.int64),
            pair_node=np.arange(nodes),  # pair p at node p
            route_src_pair=route_node.astype(np.int64),
        )

    for enough in (
        index((0, start, 0), (0, 0, 0), 0),
        index((0, 0, 0), (1, 1, start), 0),
        index((0, 0, 0), (0, 0, 0), start),
    ):
        assert slotcore.radix_sort(enough) is True
    spread = start - 1  # many candidates in all, too few at any one node
    assert slotcore.radix_sort(index((spread,) * 3, (spread,) * 3, start - 1)) is None


def _global_service_and_routes(ix, state, scores, hit):
    """SPEC 3.2 steps 2-3 as written: every live service candidate, then every live route,
    in one global descending order of score (ties by index), with the kernel's arithmetic."""
    from mabp_gym.core.kernels.rules import EPS

    n_act, n_route = ix.num_actions, ix.num_routes
    busy = state.service_action >= 0
    left = ix.mu - np.where(busy, np.minimum(state.service_residual, ix.mu), 0.0)
    avail = state.queue_len.copy()
    service = np.zeros(n_act, dtype=np.int64)
    start = np.full(ix.num_nodes, -1, dtype=np.int64)
    block = scores[:n_act]
    live = np.flatnonzero((block > 0) & (state.queue_len[ix.action_pair] > 0))
    for a in live[np.argsort(-block[live], kind="stable")]:
        i, p = ix.action_node[a], ix.action_pair[a]
        if left[i] <= EPS or avail[p] == 0:
            continue
        w = ix.work[hit[a], a]
        if w > ix.mu[i] + EPS:
            start[i], avail[p], left[i] = a, avail[p] - 1, 0.0
            continue
        whole = (left[i] + EPS) // w if w > 0 else avail[p]
        units = avail[p] if whole >= avail[p] else np.int64(whole)
        if units >= 1:
            service[a], avail[p], left[i] = units, avail[p] - units, left[i] - units * w
    route = np.zeros(n_route, dtype=np.int64)
    capacity = ix.link_capacity.astype(np.int64)
    block = scores[n_act : n_act + n_route]
    live = np.flatnonzero((block > 0) & (state.queue_len[ix.route_src_pair] > 0))
    for r in live[np.argsort(-block[live], kind="stable")]:
        p, e = ix.route_src_pair[r], ix.route_link[r]
        route[r] = min(avail[p], capacity[e])
        avail[p], capacity[e] = avail[p] - route[r], capacity[e] - route[r]
    return service, start, route


def test_projection__node_by_node_is_the_global_order_of_service_and_routing():
    # The kernel orders each node's service and routing candidates on its own (they take
    # only that node's compute, queues and links): the same control as one global order,
    # on states of a run, for scores with many ties and for all-positive scores (a node of
    # `mixed` then has up to 23 live routes; the merge past _RANK_UP_TO is the
    # _descending tests').
    from mabp_gym import Simulator, make_workload

    for name, overrides in (
        ("mixed", {}),
        ("rag", {}),
        ("agentic", {}),
        ("multihop", {"nodes": 12}),
    ):
        wl = make_workload(name, **overrides)
        ix, kernel = wl.index, slotcore.CompiledProjection(wl)
        sim = Simulator(wl)
        sim.reset(3)
        rng = np.random.default_rng(4)
        for t in range(120):
            for scores in (
                np.round(rng.uniform(-1, 1, ix.num_scores), 1),
                rng.uniform(0.01, 1.0, ix.num_scores),
            ):
                _, hit, route, service, start = kernel(sim.state, scores, True)
                want = _global_service_and_routes(ix, sim.state, scores, hit)
                assert np.array_equal(service, want[0]), (name, t)
                assert np.array_equal(start, want[1]), (name, t)
                assert np.array_equal(route, want[2]), (name, t)
            sim.step_scores(rng.uniform(-1, 1, ix.num_scores))
