"""Exact-step tests on tiny hand-computed workloads: queues, hits, penalties, generated and
evicted objects, slot by slot, and the causal order of SPEC section 1."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mabp_gym import (
    Action,
    Commodity,
    Control,
    InfeasibleControlError,
    Link,
    Node,
    Signature,
    Simulator,
    Workload,
    make_workload,
)


def scores(wl: Workload, service=1.0, route=1.0, transfer=-1.0, retain=1.0) -> np.ndarray:
    """A score vector with one value per candidate block (scalars or arrays)."""
    ix = wl.index
    blocks = []
    for value, size in (
        (service, ix.num_actions),
        (route, ix.num_routes),
        (transfer, ix.num_transfers),
        (retain, ix.num_retains),
    ):
        blocks.append(np.broadcast_to(np.asarray(value, dtype=float), (size,)))
    return np.concatenate(blocks)


def idle_arrivals(name: str, **overrides) -> Workload:
    return make_workload(name, load=0.0, **overrides)


# -- work reuse: generation, next-slot use, multi-slot service --------------------------------
def test_work_reuse__object_generated_in_slot_t_is_a_hit_only_from_t_plus_1():
    wl = idle_arrivals("work_reuse", kappa_w=4)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 3)

    control, out = sim.step_scores(scores(wl))
    # Slot 0: no memory, a miss needs all 4 units of compute: one unit served, no start.
    assert control.service.tolist() == [1]
    assert (out.served, out.hits, out.completed, out.delays) == (1, 0, 1, (1,))
    assert out.generated == ((0, 0),) and out.insertions == 1 and out.evictions == 0
    assert out.penalty_compute == pytest.approx(4.0)  # l(miss) = K * l = 4, no credit
    assert out.backlog == 2
    assert sim.state.holder[0, 0] == 0 and sim.state.owner.tolist() == [0]

    control, out = sim.step_scores(scores(wl))
    # Slot 1: the object is resident, each unit is a hit with work 1: both served.
    assert control.service.tolist() == [2]
    assert (out.served, out.hits, out.completed, out.delays) == (2, 2, 2, (2, 2))
    assert out.generated == () and out.insertions == 0
    assert out.penalty_compute == pytest.approx(2.0)
    assert out.backlog == 0


def test_work_reuse__leftover_compute_does_not_start_a_unit_that_fits_mu():
    wl = idle_arrivals("work_reuse", kappa_w=4)
    # mu = 5: after one miss (work 4) one unit of compute is left. The next unit is still a
    # miss in this slot (the generated object is not usable yet); its work 4 <= mu, so it
    # is served whole in a later slot and never split (the paper's per-slot constraint).
    wl = Workload(**{**_fields(wl), "nodes": (Node("server", "server", mu=5.0, budget=1.0),)})
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 3)

    control, out = sim.step_scores(scores(wl))
    assert control.service.tolist() == [1] and control.start.tolist() == [-1]
    assert (out.served, out.started, out.hits, out.work) == (1, 0, 0, 4.0)
    assert out.backlog == 2

    control, out = sim.step_scores(scores(wl))
    # Slot 1: the object generated in slot 0 is resident: both units are hits (work 1).
    assert control.service.tolist() == [2]
    assert (out.served, out.hits, out.completed, out.work) == (2, 2, 2, 2.0)
    assert out.penalty_compute == pytest.approx(2.0)
    bad = Control(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([0]), np.array([0]), np.ones(1)
    )
    sim.add_units(0, 0, 1)
    with pytest.raises(InfeasibleControlError, match="multi-slot start.*exceeds mu"):
        sim.step(bad)  # a hit (work 1 <= mu) may not start in service


def test_multi_slot_service__unit_in_service_cannot_be_routed_or_served_twice():
    wl = idle_arrivals("work_reuse", kappa_w=4)
    wl = Workload(**{**_fields(wl), "nodes": (Node("server", "server", mu=3.0, budget=1.0),)})
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 1)
    control, out = sim.step_scores(scores(wl))
    assert control.start.tolist() == [0] and out.served == 0 and out.backlog == 1
    assert sim.state.queue_len.tolist() == [0]
    # The unit in service leaves the node no compute this slot: a hand-made control that
    # serves anything more is infeasible.
    sim.add_units(0, 0, 1)
    bad = Control(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([1]), np.array([-1]), np.ones(1)
    )
    before = sim.state.queue_len.copy()
    with pytest.raises(InfeasibleControlError, match="compute capacity.*server"):
        sim.step(bad)
    assert np.array_equal(sim.state.queue_len, before) and sim.state.t == 1
    control, out = sim.step_scores(scores(wl))
    # The unit in service takes its last unit of work first and completes, generating the
    # object (usable from the next slot); the waiting unit is still a miss and starts in
    # service with the 2 units of compute left.
    assert (out.served, out.completed, out.hits, out.started) == (1, 1, 0, 1)
    assert out.generated == ((0, 0),) and control.start.tolist() == [0]
    assert sim.state.service_residual[0] == pytest.approx(2.0)


# -- successor: same-node successors, routing arrives next slot -------------------------------
def test_successor__successors_join_the_same_node_and_routes_arrive_next_slot():
    wl = idle_arrivals("successor", mu_u=2, mu_v=1, pi_h=1.0, pi_l=0.0)
    up, ver = wl.node_id("up"), wl.node_id("ver")
    job = wl.commodity_id("job")
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(up, job, 2)

    def queues():
        return sim.state.backlog_matrix(wl)

    _, out = sim.step_scores(scores(wl))
    # Slot 0: both upstream units are misses and each creates a verifier job at `up`.
    assert (out.served, out.hits, out.completed, out.routed) == (2, 0, 0, 0)
    assert out.generated == ((up, 0),)  # one object: the second completion finds it pending
    assert queues()[up].tolist() == [0, 2] and queues()[ver].tolist() == [0, 0]

    sim.add_units(up, job, 1)  # a new request born in slot 1
    control, out = sim.step_scores(scores(wl))
    # Slot 1: the new job is a hit (pi_l = 0) and leaves at once; the two verifier jobs are
    # routed and are not at the verifier until slot 2.
    assert (out.served, out.hits, out.completed, out.delays) == (1, 1, 1, (1,))
    assert out.routed == 2 and control.route.tolist() == [2]
    assert queues()[up].tolist() == [0, 0] and queues()[ver].tolist() == [0, 2]

    _, out = sim.step_scores(scores(wl))
    assert (out.served, out.completed, out.delays) == (1, 1, (3,))
    _, out = sim.step_scores(scores(wl))
    assert (out.served, out.completed, out.delays) == (1, 1, (4,))
    assert out.backlog == 0


# -- memory: transfers, retention, eviction, memory penalty ------------------------------------
def two_node_memory_workload() -> Workload:
    """Nodes a, b (budget 1 each) both serving c0 (compatible with s0) and c1 (with s1)."""
    actions = []
    for node in (0, 1):
        for c in (0, 1):
            actions.append(
                Action(
                    node=node,
                    commodity=c,
                    signature=c,
                    work_hit=1.0,
                    work_miss=2.0,
                    loss_hit=1.0,
                    loss_miss=3.0,
                    credit_hit=0.5,
                )
            )
    return Workload(
        name="two_node",
        nodes=(Node("a", "server", mu=2.0, budget=1.0), Node("b", "server", mu=2.0, budget=1.0)),
        links=(Link(0, 1, capacity=5, cost=0.25, bandwidth=1.0),),
        commodities=(Commodity("c0"), Commodity("c1")),
        signatures=(Signature("s0", 1.0), Signature("s1", 1.0)),
        actions=tuple(actions),
        arrival_mix=((0, 0, 0.5), (0, 1, 0.5)),
        load=0.0,
        replicas=1,
        eta=1.0,
        migration_cost=0.5,
        theta=0.1,
        omega=0.2,
        initial_memory=(((0, 0),),),
    )


def test_memory__transfer_then_hit_generate_retain_and_evict_with_exact_penalties():
    wl = two_node_memory_workload()
    ix = wl.index
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    assert sim.state.holder.tolist() == [[0, -1], [-1, -1]]
    sim.add_units(1, 0, 1)  # c0 at b: a hit once s0 has moved to b
    sim.add_units(0, 1, 1)  # c1 at a: a miss, generates s1 at a

    transfer = np.where(ix.transfer_signature == 0, 1.0, -1.0)  # move s0 along a -> b
    control, out = sim.step_scores(scores(wl, route=-1.0, transfer=transfer))
    assert control.transfers.tolist() == [int(np.flatnonzero(ix.transfer_signature == 0)[0])]
    assert out.transfers == 1 and out.served == 2 and out.hits == 1
    assert out.generated == ((0, 1),) and out.insertions == 1 and out.evicted == ()
    assert sim.state.holder.tolist() == [[-1, 1], [0, -1]]
    # compute: hit at b (1 - 0.5) + miss at a (3); memory: move 0.5 * 1, hold 0.1 * 2,
    # write 0.2 * 1.
    assert out.penalty_compute == pytest.approx(0.5 + 3.0)
    assert out.penalty_memory == pytest.approx(0.5 + 0.2 + 0.2)
    assert out.penalty_transmission == 0.0

    retain = np.ones(ix.num_retains)
    retain[ix.retain_of[1, 0]] = -0.5  # b drops s0
    _, out = sim.step_scores(scores(wl, route=-1.0, retain=retain))
    assert out.evicted == ((1, 0),) and out.evictions == 1
    assert sim.state.holder.tolist() == [[-1, 1], [-1, -1]]
    assert sim.state.owner.tolist() == [-1, 0]
    assert out.penalty_memory == pytest.approx(0.1 * 1)


def test_memory__retention_keeps_highest_priority_that_fits_and_frees_identities():
    wl = two_node_memory_workload()
    ix = wl.index
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 1, 1)  # a holds s0; serving c1 generates s1 at a
    retain = np.zeros(ix.num_retains)
    retain[ix.retain_of[0, 1]] = 0.9  # a prefers the new s1 over s0 (budget 1: one fits)
    retain[ix.retain_of[0, 0]] = 0.1
    _, out = sim.step_scores(scores(wl, route=-1.0, retain=retain))
    assert out.generated == ((0, 1),) and out.insertions == 1
    assert out.evicted == ((0, 0),)
    assert sim.state.holder.tolist() == [[-1, 1], [-1, -1]]
    assert sim.state.owner.tolist() == [-1, 0]


def test_memory__a_retention_tie_goes_to_the_lower_signature():
    # The same slot with equal priorities: budget 1 keeps one of s0 (held) and s1 (new);
    # the tie goes to the lower signature, so s0 stays and s1 is never inserted.
    wl = two_node_memory_workload()
    ix = wl.index
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 1, 1)
    retain = np.zeros(ix.num_retains)
    retain[ix.retain_of[0, 0]] = retain[ix.retain_of[0, 1]] = 0.5
    _, out = sim.step_scores(scores(wl, route=-1.0, retain=retain))
    assert out.generated == ((0, 1),) and out.insertions == 0 and out.evicted == ()
    assert sim.state.holder.tolist() == [[0, -1], [-1, -1]]


def test_routing__transmission_penalty_and_arrival_at_t_plus_1():
    wl = two_node_memory_workload()
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 1, 3)
    service = np.array([-1.0, -1.0, 1.0, 1.0])  # only b serves
    control, out = sim.step_scores(scores(wl, service=service, route=1.0))
    assert out.served == 0 and out.routed == 3
    assert out.penalty_transmission == pytest.approx(3 * 0.25)
    assert sim.state.backlog_matrix(wl).tolist() == [[0, 0], [0, 3]]
    _, out = sim.step_scores(scores(wl, service=service, route=1.0))
    # b holds nothing: c1 misses cost 2 each, mu = 2: one unit per slot.
    assert (out.served, out.hits, out.completed) == (1, 0, 1)


# -- no-memory mode, separation ----------------------------------------------------------------
def test_no_memory_mode__every_action_misses_and_nothing_is_held():
    wl = idle_arrivals("work_reuse", kappa_w=4)
    sim = Simulator(wl, memory=False, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 3)
    for expected_backlog in (2, 1, 0):
        _, out = sim.step_scores(scores(wl))
        assert (out.served, out.hits, out.generated) == (1, 0, ())
        assert out.backlog == expected_backlog
        assert (sim.state.holder < 0).all()


def test_separation__held_object_flips_with_seed_parity():
    wl = make_workload("separation", K=8)
    sim = Simulator(wl, check_invariants=True)
    held = []
    for seed in (0, 1, 2, 3):
        sim.reset(seed)
        held.append(int(np.flatnonzero(sim.state.holder[0] >= 0)[0]))
    assert held == [0, 1, 0, 1]
    sim.reset(1)  # holds obj1: action 1 is the hit
    sim.add_units(0, 0, 1)
    _, out = sim.step_scores(scores(wl, service=np.array([1.0, 0.5])))
    assert out.hits == 0 and out.penalty_compute == pytest.approx(8.0)
    assert out.generated == ()  # no generation in this workload
    sim.add_units(0, 0, 1)
    _, out = sim.step_scores(scores(wl, service=np.array([0.5, 1.0])))
    assert out.hits == 1 and out.penalty_compute == pytest.approx(1.0)


# -- feasibility errors name what was violated -------------------------------------------------
def test_check_control__errors_name_constraint_node_and_commodity():
    wl = idle_arrivals("successor")
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 1)
    good = sim.project(scores(wl))
    too_many = Control(good.transfers, good.route, np.array([2, 0]), good.start, good.retain)
    with pytest.raises(InfeasibleControlError, match=r"queue.*node up, commodity 'job'"):
        sim.step(too_many)
    wrong_shape = Control(good.transfers, good.route, np.array([1]), good.start, good.retain)
    with pytest.raises(InfeasibleControlError, match=r"shape.*expected shape \(2,\)"):
        sim.step(wrong_shape)
    over_link = Control(good.transfers, np.array([11]), good.service, good.start, good.retain)
    with pytest.raises(InfeasibleControlError, match=r"link capacity.*up->ver"):
        sim.step(over_link)
    over_compute = Control(good.transfers, good.route, np.array([3, 0]), good.start, good.retain)
    with pytest.raises(InfeasibleControlError, match=r"compute capacity.*node up"):
        sim.step(over_compute)
    negative = Control(good.transfers, good.route, np.array([-1, 0]), good.start, good.retain)
    with pytest.raises(InfeasibleControlError, match="nonnegativity"):
        sim.step(negative)
    assert sim.state.t == 0 and sim.state.queue_len.tolist()[0] == 1


def _only_a_transfer(wl: Workload, signature: int) -> tuple[Simulator, Control]:
    """A fresh simulator of ``wl`` and the idle control plus the move of ``signature``."""
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    idle = Control.idle(wl)
    move = int(np.flatnonzero(wl.index.transfer_signature == signature)[0])
    return sim, Control(np.array([move]), idle.route, idle.service, idle.start, idle.retain)


def test_check_control__transfer_of_object_the_source_lacks_is_rejected():
    sim, bad = _only_a_transfer(two_node_memory_workload(), 1)
    with pytest.raises(InfeasibleControlError, match=r"transfer source.*a->b.*'s1'"):
        sim.step(bad)
    assert sim.state.holder.tolist() == [[0, -1], [-1, -1]]


def test_check_control__a_transfer_past_the_destinations_budget_is_rejected():
    # b holds s1 and has budget 1: s0 (size 1) cannot join it, though the link takes it.
    wl = dataclasses.replace(two_node_memory_workload(), initial_memory=(((0, 0), (1, 1)),))
    sim, bad = _only_a_transfer(wl, 0)
    with pytest.raises(InfeasibleControlError, match=r"memory budget violated at node b"):
        sim.step(bad)
    assert sim.state.holder.tolist() == [[0, -1], [-1, 1]] and sim.state.t == 0


def test_projection__rejects_bad_score_vectors():
    wl = make_workload("mixed")
    sim = Simulator(wl)
    sim.reset(0)
    d = wl.index.num_scores
    for bad in (np.zeros(d - 1), np.zeros((d, 1)), np.full(d, np.nan), np.full(d, np.inf)):
        with pytest.raises(ValueError, match=rf"\({d},\)"):
            sim.project(bad)


def test_projection__all_negative_scores_are_the_legal_idle_action():
    wl = make_workload("mixed", load=0.5)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    for _ in range(5):
        control, out = sim.step_scores(-np.ones(wl.index.num_scores))
        assert out.served == 0 and out.routed == 0 and out.transfers == 0
        assert not control.service.any() and not control.route.any()
    assert sim.state.units == sum(len(q) for q in sim.state.queues) > 0


def _fields(wl: Workload) -> dict:
    from dataclasses import fields

    return {f.name: getattr(wl, f.name) for f in fields(wl) if f.init}


def test_projection__transfers_into_a_node_that_just_sent_the_signature_stay_feasible():
    # A holds one replica of s and C the other; moving A -> B frees A, but a replica may not
    # arrive at a node that held one at the start of the slot: the projection skips C -> A
    # instead of emitting a control that the feasibility check rejects.
    actions = tuple(Action(node=i, commodity=0, signature=0) for i in range(3))
    wl = Workload(
        name="triangle",
        nodes=tuple(Node(n, "server", mu=1.0, budget=1.0) for n in "ABC"),
        links=(Link(0, 1, capacity=1, bandwidth=1.0), Link(2, 0, capacity=1, bandwidth=1.0)),
        commodities=(Commodity("c"),),
        signatures=(Signature("s", 1.0),),
        actions=actions,
        arrival_mix=((0, 0, 1.0),),
        load=0.0,
        replicas=2,
        initial_memory=(((0, 0), (2, 0)),),
    )
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    transfer = np.array([1.0, 0.5])  # A -> B first, then C -> A
    control, out = sim.step_scores(scores(wl, transfer=transfer, route=-1.0))
    assert control.transfers.tolist() == [0] and out.transfers == 1
    assert (sim.state.holder[:, 0] >= 0).tolist() == [False, True, True]


def test_separation__memory_is_fixed_for_the_episode_even_under_the_idle_control():
    wl = make_workload("separation")
    assert wl.index.num_retains == 0 and wl.index.num_transfers == 0
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    for _ in range(20):
        sim.step(Control.idle(wl))
    assert sim.state.holder.tolist() == [[0, -1]]


def test_simulator__step_before_reset_is_refused():
    wl = make_workload("work_reuse")
    with pytest.raises(RuntimeError, match=r"call reset\(seed\) before step"):
        Simulator(wl).step(Control.idle(wl))


def test_add_units__rejects_inadmissible_pairs_and_future_births():
    wl = idle_arrivals("successor")
    sim = Simulator(wl)
    sim.reset(0)
    with pytest.raises(ValueError, match="not admissible at node 'ver'"):
        sim.add_units(wl.node_id("ver"), wl.commodity_id("job"), 1)
    with pytest.raises(ValueError, match="birth must be < the current slot 0"):
        sim.add_units(0, 0, 1, birth=0)
