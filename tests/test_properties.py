"""Property-based tests of the simulator core (SPEC sections 1, 3.2 and 6).

Every property runs over two families of workloads: the built-in builders with random valid
overrides, and random small hand-built networks (1-4 nodes, random links, 1-3 commodities
with random successor laws, 0-3 signatures, random budgets, replicas, works, ``gen_prob``,
initial and fixed memory). The memory properties add small networks built so that several
nodes generate the same signature in one slot. Score vectors are floats in ``[-1, 1]``:
uniform, mostly positive, all negative, heavily tied, constant, extreme (subnormal, signed
zero) and, for short vectors, drawn element by element.

The invariants are recomputed here from the raw state (FIFO contents, ``holder``, ``owner``,
signature sizes); nothing trusts the simulator's own bookkeeping (``state.units``,
``memory_used``) or its ``check_invariants`` mode.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import mabp_gym
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
    check_control,
    make_workload,
    workload_params,
)
from mabp_gym.core.workload import ROLES

TOL = 1e-9  # the feasibility tolerance of control.py (EPS)
MAX_SLOTS = 20

SETTINGS = dict(
    deadline=None,
    database=None,  # no example database written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------------------------------
# Strategies: workloads
# ---------------------------------------------------------------------------------------
# Upper ends used when drawing an override, so that episodes stay small (the builders
# accept much larger values; the ranges below are all inside the declared ones).
_CAPS = {
    "Z": 3,
    "load": 3.0,
    "kappa_w": 8.0,
    "K": 8.0,
    "K_w": 8.0,
    "mu": 5.0,
    "mu_u": 4.0,
    "mu_v": 4.0,
    "link_capacity": 12,
    "bandwidth": 6.0,
    "replicas": 4,
    "skew": 3.0,
    "copies": 2,
    "nodes": 12,
    "attach": 3,
    "classes": 3,
    "servers": 4,
}
_SKIP = {"horizon"}


def _param_value(name: str, param) -> st.SearchStrategy:
    low = param.low
    high = _CAPS.get(name, 5.0 if param.high is None else min(param.high, 5.0))
    if param.integer:
        return st.integers(int(low), int(high))
    values = st.floats(
        min_value=float(low),
        max_value=float(high),
        exclude_min=param.low_open,
        allow_nan=False,
        allow_infinity=False,
    )
    if param.optional:
        values = st.none() | values
    return values


@st.composite
def builtin_workloads(draw) -> Workload:
    """A built-in workload with a random subset of its parameters overridden."""
    name = draw(st.sampled_from(mabp_gym.WORKLOADS))
    params = workload_params(name)
    overrides = {}
    for key, param in params.items():
        if key in _SKIP or not draw(st.booleans()):
            continue
        overrides[key] = draw(_param_value(key, param))
    # Cross-parameter constraints the builders document.
    if name == "successor":
        mu_u = overrides.get("mu_u", params["mu_u"].default)
        link = overrides.get("link_capacity", params["link_capacity"].default)
        overrides["link_capacity"] = max(int(link), math.ceil(mu_u))
        pi_h = overrides.get("pi_h", params["pi_h"].default)
        overrides["pi_l"] = min(overrides.get("pi_l", params["pi_l"].default), pi_h)
    for family in ("rag", "moe", "agentic"):  # a hit verifies no more than a miss
        hit, miss = f"verify_{family}_hit", f"verify_{family}_miss"
        if hit in params:
            top = overrides.get(miss, params[miss].default)
            overrides[hit] = min(overrides.get(hit, params[hit].default), top)
    if name == "multihop":
        nodes = overrides.get("nodes", params["nodes"].default)
        overrides["attach"] = min(overrides.get("attach", 2), nodes - 2)
        if overrides.get("servers") is not None:
            overrides["servers"] = min(overrides["servers"], nodes - 1)
    if name == "mixed":
        shares = [
            overrides.get(k, params[k].default) for k in ("rag_share", "moe_share", "agentic_share")
        ]
        if not any(shares):
            overrides["rag_share"] = 0.4
    return make_workload(name, **overrides)


_NICE_WORK = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0])
_WORK = _NICE_WORK | st.floats(0.1, 6.0)
_UNIT = st.floats(0.0, 1.0)
_SMALL = st.floats(0.0, 2.0)


@st.composite
def _law(draw, n_comm: int) -> tuple[tuple[int, float], ...]:
    """A successor law: distinct targets whose probabilities sum to at most 1."""
    targets = draw(st.lists(st.integers(0, n_comm - 1), max_size=n_comm, unique=True))
    if not targets:
        return ()
    weights = [draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]) | _UNIT) for _ in targets]
    exit_weight = draw(st.sampled_from([0.0, 1.0]) | _UNIT)
    total = sum(weights) + exit_weight
    if total <= 0:
        return ()
    return tuple((c, w / total) for c, w in zip(targets, weights, strict=True))


@st.composite
def random_workloads(draw) -> Workload:
    """A random small valid network built directly from the dataclasses."""
    n_nodes = draw(st.integers(1, 4))
    n_comm = draw(st.integers(1, 3))
    n_sig = draw(st.integers(0, 3))
    replicas = draw(st.integers(1, 3))
    sizes = [draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for _ in range(n_sig)]
    mus = [draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0])) for _ in range(n_nodes)]
    if not any(mus):
        mus[draw(st.integers(0, n_nodes - 1))] = draw(st.sampled_from([1.0, 2.0]))
    compute = [i for i in range(n_nodes) if mus[i] > 0]

    actions: list[Action] = []
    for c in range(n_comm):
        servers = draw(
            st.lists(st.sampled_from(compute), min_size=1, max_size=len(compute), unique=True)
        )
        # Servers of a commodity mostly share its signature (so objects can migrate between
        # them); some get a second action with another signature (or none).
        shared = draw(st.integers(-1, n_sig - 1))
        for i in servers:
            sigs = [shared]
            if draw(st.integers(0, 3)) == 0:
                other = draw(st.integers(-1, n_sig - 1))
                sigs += [other] if other != shared else []
            for s in sigs:
                actions.append(
                    Action(
                        node=i,
                        commodity=c,
                        signature=s,
                        work_hit=draw(_WORK),
                        work_miss=draw(_WORK),
                        loss_hit=draw(_SMALL),
                        loss_miss=draw(_SMALL),
                        credit_hit=draw(_SMALL),
                        successors_hit=draw(_law(n_comm)),
                        successors_miss=draw(_law(n_comm)),
                        gen_prob=draw(st.sampled_from([0.0, 0.5, 1.0]) | _UNIT),
                    )
                )

    pairs = [(i, c) for i in range(n_nodes) for c in range(n_comm)]
    arrival_pairs = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=3, unique=True))
    weights = [draw(st.integers(1, 5)) for _ in arrival_pairs]
    arrival_mix = tuple(
        (i, c, w / sum(weights)) for (i, c), w in zip(arrival_pairs, weights, strict=True)
    )

    # Admissibility as workload.py derives it; every admissible queue must drain.
    serves = {(a.node, a.commodity) for a in actions}
    admissible = set(serves) | set(arrival_pairs)
    for a in actions:
        for c, _ in a.successors_hit + a.successors_miss:
            admissible.add((a.node, c))
    ordered = [(i, j) for i in range(n_nodes) for j in range(n_nodes) if i != j]
    if draw(st.booleans()):  # a complete graph: many route and transfer candidates
        edges = set(ordered)
    else:
        edges = set(
            draw(st.lists(st.sampled_from(ordered), max_size=len(ordered), unique=True))
            if ordered
            else []
        )
    for i, c in sorted(admissible):
        if (i, c) in serves:
            continue
        targets = [j for j in range(n_nodes) if (j, c) in serves]
        if not any((i, j) in edges for j in targets):
            edges.add((i, draw(st.sampled_from(targets))))
    links = tuple(
        Link(
            i,
            j,
            capacity=draw(st.integers(0, 6)),
            cost=draw(_SMALL),
            bandwidth=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 4.0])),
        )
        for i, j in sorted(edges)
    )

    budgets = [
        draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 6.0, 6.0, 10.0])) for _ in range(n_nodes)
    ]
    nodes = tuple(
        Node(f"n{i}", draw(st.sampled_from(ROLES)), mu=mus[i], budget=budgets[i])
        for i in range(n_nodes)
    )

    eligible = sorted({(a.node, a.signature) for a in actions if a.signature >= 0})
    alternatives = []
    if eligible and draw(st.integers(0, 2)):
        for _ in range(draw(st.integers(1, 2))):
            used = [0.0] * n_nodes
            count = [0] * n_sig
            placed = []
            for i, s in draw(st.permutations(eligible)):
                if (
                    draw(st.integers(0, 3))
                    and used[i] + sizes[s] <= budgets[i]
                    and count[s] < replicas
                ):
                    used[i] += sizes[s]
                    count[s] += 1
                    placed.append((i, s))
            alternatives.append(tuple(placed))
    fixed = bool(alternatives) and draw(st.integers(0, 3)) == 0

    return Workload(
        name="random",
        nodes=nodes,
        links=links,
        commodities=tuple(Commodity(f"c{k}", "f", k, 0) for k in range(n_comm)),
        signatures=tuple(Signature(f"s{k}", sizes[k], "obj") for k in range(n_sig)),
        actions=tuple(actions),
        arrival_mix=arrival_mix,
        load=draw(st.floats(0.0, 3.0)),
        lambda_ref=draw(st.sampled_from([0.5, 1.0, 2.0])),
        replicas=replicas,
        eta=draw(_SMALL),
        migration_cost=draw(_SMALL),
        theta=draw(_SMALL),
        omega=draw(_SMALL),
        initial_memory=tuple(alternatives),
        fixed_memory=fixed,
    )


@st.composite
def generation_races(draw) -> Workload:
    """2-4 linked servers of one commodity sharing one signature, arrivals at each of them:
    several nodes often complete, and generate the object, in the same slot while fewer
    free identities than generating nodes exist."""
    n = draw(st.integers(2, 4))
    nodes = tuple(
        Node(
            f"s{i}",
            "server",
            mu=draw(st.sampled_from([1.0, 2.0])),
            budget=draw(st.sampled_from([1.0, 2.0])),
        )
        for i in range(n)
    )
    actions = tuple(
        Action(
            node=i,
            commodity=0,
            signature=0,
            work_hit=1.0,
            work_miss=1.0,
            gen_prob=draw(st.sampled_from([1.0, 0.5])),
            successors_hit=((0, 0.5),) if draw(st.booleans()) else (),
        )
        for i in range(n)
    )
    links = tuple(
        Link(i, j, capacity=2, bandwidth=1.0) for i in range(n) for j in range(n) if i != j
    )
    return Workload(
        name="races",
        nodes=nodes,
        links=links,
        commodities=(Commodity("c"),),
        signatures=(Signature("o", 1.0),),
        actions=actions,
        arrival_mix=tuple((i, 0, 1.0 / n) for i in range(n)),
        load=draw(st.floats(0.5, 3.0)),
        lambda_ref=float(n),
        replicas=draw(st.integers(1, n)),
    )


workloads = builtin_workloads() | random_workloads()


# ---------------------------------------------------------------------------------------
# Strategies: scores and scenarios
# ---------------------------------------------------------------------------------------
_EXTREMES = np.array([1.0, -1.0, 0.0, -0.0, 5e-324, -5e-324, 1e-300, 1.0 - 2**-53, 0.5])


def _numpy_scores(mode: str, seed: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if mode == "uniform":
        return rng.uniform(-1.0, 1.0, size)
    if mode == "positive":
        return rng.uniform(0.0, 1.0, size)
    if mode == "mostly_positive":
        return rng.uniform(-0.2, 1.0, size)
    if mode == "negative":
        return -rng.uniform(0.0, 1.0, size)
    if mode == "ties":
        return rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size)
    if mode == "constant":
        return np.full(size, rng.choice([-1.0, 0.0, 0.5, 1.0]))
    return rng.choice(_EXTREMES, size)  # "extreme"


def score_vectors(size: int) -> st.SearchStrategy:
    # Positive scores act (serve, route, move, keep): weight them up so that states fill.
    modes = st.sampled_from(
        [
            "uniform",
            "positive",
            "mostly_positive",
            "mostly_positive",
            "negative",
            "ties",
            "constant",
            "extreme",
        ]
    )
    generated = st.builds(_numpy_scores, modes, st.integers(0, 2**32 - 1), st.just(size))
    if size > 32:
        return generated
    element = st.floats(-1.0, 1.0) | st.sampled_from([-1.0, 0.0, 0.5, 1.0])
    return generated | arrays(np.float64, size, elements=element)


@dataclass(frozen=True)
class Scenario:
    workload: Workload
    memory: bool
    seed: int
    scores: tuple[np.ndarray, ...]

    def __repr__(self) -> str:  # short, for hypothesis' falsifying-example report
        wl = self.workload
        return (
            f"Scenario({wl.name!r}, params={dict(wl.params)}, nodes={wl.nodes}, "
            f"links={wl.links}, actions={wl.actions}, signatures={wl.signatures}, "
            f"arrival_mix={wl.arrival_mix}, load={wl.load}, lambda_ref={wl.lambda_ref}, "
            f"replicas={wl.replicas}, initial_memory={wl.initial_memory}, "
            f"memory={self.memory}, seed={self.seed}, "
            f"scores=[{', '.join(np.array2string(s, separator=',') for s in self.scores)}])"
        )


@st.composite
def scenarios(
    draw, memory: bool | None = None, min_slots: int = 1, source: st.SearchStrategy = workloads
) -> Scenario:
    wl = draw(source)
    mem = draw(st.booleans()) if memory is None else memory
    seed = draw(st.integers(0, 2**32 - 1))
    n_slots = draw(st.integers(min_slots, MAX_SLOTS))
    vectors = st.lists(score_vectors(wl.index.num_scores), min_size=n_slots, max_size=n_slots)
    return Scenario(wl, mem, seed, tuple(draw(vectors)))


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------
def recount_backlog(state) -> int:
    """Waiting units (FIFO contents) plus units in multi-slot service."""
    return sum(len(q) for q in state.queues) + int(np.count_nonzero(state.service_action >= 0))


def snapshot(sim: Simulator):
    """Everything a slot may change, in comparable form (the RNG state included)."""
    st_ = sim.state
    return (
        st_.t,
        st_.units,
        tuple(tuple(q) for q in st_.queues),
        st_.queue_len.tolist(),
        st_.holder.tolist(),
        st_.owner.tolist(),
        st_.memory_used.tolist(),
        st_.service_action.tolist(),
        st_.service_residual.tolist(),
        st_.service_hit.tolist(),
        st_.service_birth.tolist(),
        sim.rng.bit_generator.state,
    )


def outcome_dict(outcome) -> dict:
    return {
        f.name: (
            getattr(outcome, f.name).tolist()
            if isinstance(getattr(outcome, f.name), np.ndarray)
            else getattr(outcome, f.name)
        )
        for f in fields(outcome)
    }


def control_tuple(control: Control) -> tuple:
    return tuple(np.asarray(getattr(control, f.name)).tolist() for f in fields(control))


def run(scenario: Scenario, check_invariants: bool = False):
    """Reset and yield ``(sim, scores, control, outcome)`` for every slot of the scenario."""
    sim = Simulator(scenario.workload, memory=scenario.memory, check_invariants=check_invariants)
    sim.reset(scenario.seed)
    for scores in scenario.scores:
        control = sim.project(scores)
        yield sim, scores, control, sim.step(control)


def assert_queues_sane(state) -> None:
    lengths = [len(q) for q in state.queues]
    assert state.queue_len.tolist() == lengths, "queue_len disagrees with the FIFO contents"
    assert (state.queue_len >= 0).all(), f"negative queue: {state.queue_len}"
    for q in state.queues:
        # every waiting unit was born in an earlier slot (arrivals of slot t join Q(t+1))
        assert all(0 <= birth < state.t for birth in q), (list(q), state.t)


def assert_memory_within_budget(workload: Workload, state) -> None:
    ix = workload.index
    held = np.zeros(ix.num_nodes)
    for i in range(ix.num_nodes):
        for s in range(ix.num_signatures):
            if state.holder[i, s] >= 0:
                held[i] += workload.signatures[s].size
    for i in range(ix.num_nodes):
        assert held[i] <= workload.nodes[i].budget + TOL, (
            f"node {i} holds {held[i]} size units, budget {workload.nodes[i].budget}"
        )
    assert np.allclose(state.memory_used, held, atol=1e-6), (state.memory_used, held)


def assert_identities_consistent(workload: Workload, state) -> None:
    ix = workload.index
    reps = workload.replicas
    seen: dict[int, int] = {}
    for i in range(ix.num_nodes):
        for s in range(ix.num_signatures):
            m = int(state.holder[i, s])
            if m < 0:
                continue
            assert m not in seen, f"identity {m} held at nodes {seen[m]} and {i}"
            seen[m] = i
            assert s * reps <= m < (s + 1) * reps, f"identity {m} is not of signature {s}"
            assert int(state.owner[m]) == i, f"owner[{m}] = {state.owner[m]}, holder says {i}"
            assert ix.eligible[i, s], f"node {i} holds signature {s} but cannot use it"
    for m, i in enumerate(state.owner.tolist()):
        if i >= 0:
            assert seen.get(m) == i, f"owner[{m}] = {i} but node {i} does not hold it"
    for s in range(ix.num_signatures):
        holders = int(np.count_nonzero(state.holder[:, s] >= 0))
        assert holders <= reps, f"signature {s} held {holders} times, replicas {reps}"


# ---------------------------------------------------------------------------------------
# 1. Queues
# ---------------------------------------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(scenarios())
def test_queues__never_negative_and_lengths_match_fifos(scenario):
    sim = Simulator(scenario.workload, memory=scenario.memory)
    assert_queues_sane(sim.reset(scenario.seed))
    assert recount_backlog(sim.state) == 0
    for sim_, _scores, _control, _outcome in run(scenario):
        assert_queues_sane(sim_.state)


# ---------------------------------------------------------------------------------------
# 2. Conservation
# ---------------------------------------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(scenarios())
def test_conservation__backlog_change_is_arrivals_minus_completed(scenario):
    before = 0
    arrivals = completed = 0
    for sim, _scores, _control, outcome in run(scenario):
        after = recount_backlog(sim.state)
        assert after == before + outcome.arrivals - outcome.completed, (
            f"slot {outcome.t}: backlog {before} -> {after}, arrivals {outcome.arrivals}, "
            f"completed {outcome.completed}"
        )
        assert outcome.backlog == after
        assert sim.state.units == after
        assert int(sim.state.backlog_pairs(scenario.workload).sum()) == after
        assert outcome.completed == len(outcome.delays)
        assert outcome.served == int(outcome.served_by_action.sum())
        assert outcome.completed <= outcome.served
        # a request born in slot t0 leaves in slot t >= t0 + 1
        assert all(1 <= d <= outcome.t for d in outcome.delays), outcome.delays
        before = after
        arrivals += outcome.arrivals
        completed += outcome.completed
    assert before == arrivals - completed


# ---------------------------------------------------------------------------------------
# 3. Memory budget
# ---------------------------------------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(scenarios())
def test_memory__within_budget_after_every_slot(scenario):
    sim = Simulator(scenario.workload, memory=scenario.memory)
    assert_memory_within_budget(scenario.workload, sim.reset(scenario.seed))
    for sim_, _scores, _control, _outcome in run(scenario):
        assert_memory_within_budget(scenario.workload, sim_.state)


# ---------------------------------------------------------------------------------------
# 4. Object identities
# ---------------------------------------------------------------------------------------
@settings(max_examples=80, **SETTINGS)
@given(scenarios(memory=True) | scenarios(memory=True, source=generation_races()))
def test_memory__each_identity_at_one_node_and_at_most_replicas(scenario):
    sim = Simulator(scenario.workload, memory=True)
    assert_identities_consistent(scenario.workload, sim.reset(scenario.seed))
    for sim_, _scores, _control, outcome in run(scenario):
        assert_identities_consistent(scenario.workload, sim_.state)
        # generated objects only where no replica existed, one per (node, signature)
        assert len(set(outcome.generated)) == len(outcome.generated)
        assert outcome.insertions <= len(outcome.generated)


@settings(max_examples=60, **SETTINGS)
@given(scenarios(memory=True) | scenarios(memory=True, source=generation_races()))
def test_retention__keeps_nonnegative_priorities_that_fit(scenario):
    """SPEC 1 step 7 / 3.2 step 3: after outcomes each node keeps, from its resident and
    generated objects, ones with priority >= 0 while they fit; nothing else appears."""
    wl = scenario.workload
    ix = wl.index
    sim = Simulator(wl, memory=True)
    sim.reset(scenario.seed)
    for scores in scenario.scores:
        control = sim.project(scores)
        before = sim.state.holder.copy()
        resident = before.copy()  # after this slot's transfers
        for k in control.transfers.tolist():
            e, s = ix.transfer_link[k], ix.transfer_signature[k]
            i, j = ix.link_src[e], ix.link_dst[e]
            assert resident[i, s] >= 0 and resident[j, s] < 0
            resident[j, s], resident[i, s] = resident[i, s], -1
        outcome = sim.step(control)
        after = sim.state.holder
        if wl.fixed_memory:
            assert np.array_equal(after, before), "fixed memory changed"
            assert outcome.generated == () and outcome.evictions == 0
            continue
        generated = set(outcome.generated)
        assert len(generated) == len(outcome.generated)
        assert all(resident[i, s] < 0 for i, s in generated), "generated over a replica"
        old = {(int(i), int(s)) for i, s in zip(*np.nonzero(resident >= 0), strict=True)}
        new = {(int(i), int(s)) for i, s in zip(*np.nonzero(after >= 0), strict=True)}
        assert new <= old | generated, "an object appeared from nowhere"
        assert all(after[i, s] == resident[i, s] for i, s in old & new), "identity changed"
        assert set(outcome.evicted) == old - new
        assert outcome.evictions == len(outcome.evicted) == len(old - new)
        assert outcome.insertions == len(generated & new)
        used = (after >= 0) @ ix.signature_size
        for i, s in new:
            assert control.retain[ix.retain_of[i, s]] >= 0, f"kept ({i}, {s}) with priority < 0"
        for i, s in (old | generated) - new:
            fits = used[i] + ix.signature_size[s] <= ix.budget[i] + TOL - 1e-12
            assert control.retain[ix.retain_of[i, s]] < 0 or not fits, (
                f"dropped ({i}, {s}) with priority {control.retain[ix.retain_of[i, s]]} "
                f"though it fits: {used[i]} + {ix.signature_size[s]} <= {ix.budget[i]}"
            )


# ---------------------------------------------------------------------------------------
# 5. Projection: every control feasible, and built the way SPEC 3.2 says
# ---------------------------------------------------------------------------------------
def _assert_projection_follows_spec(workload: Workload, state, scores, control, hit, memory):
    """Only positive scores act; service is greedy and maximal before routing; routing
    fills each queue's leftover up to link capacity."""
    ix = workload.index
    service_s, route_s, transfer_s, retain_s = (scores[s] for s in ix.score_slices)
    assert np.array_equal(control.retain, retain_s)
    assert (control.service >= 0).all() and (control.route >= 0).all()
    assert (service_s[control.service > 0] > 0).all(), "service on a non-positive score"
    assert (route_s[control.route > 0] > 0).all(), "route on a non-positive score"
    assert len(set(control.transfers.tolist())) == len(control.transfers)
    assert all(transfer_s[k] > 0 for k in control.transfers.tolist())
    if not memory:
        assert len(control.transfers) == 0
    starts = [(i, int(a)) for i, a in enumerate(control.start.tolist()) if a >= 0]
    for i, a in starts:
        assert ix.action_node[a] == i and service_s[a] > 0

    # Compute left at every node after service (units in service take theirs first).
    left = ix.mu.copy()
    busy = state.service_action >= 0
    left[busy] -= np.minimum(ix.mu[busy], state.service_residual[busy])
    work = ix.work[hit, np.arange(ix.num_actions)]
    np.subtract.at(left, ix.action_node, control.service * work)
    for i, _ in starts:
        left[i] = 0.0
    avail = state.queue_len.copy()
    np.subtract.at(avail, ix.action_pair, control.service)
    for _, a in starts:
        avail[ix.action_pair[a]] -= 1
    assert (avail >= 0).all()
    for a in np.flatnonzero(service_s > 0).tolist():
        if avail[ix.action_pair[a]] > 0:
            i = ix.action_node[a]
            # A unit that fits in mu is served whole when the compute left allows it; one
            # whose work exceeds mu starts in service with whatever compute is left.
            fits_mu = work[a] <= ix.mu[i] + TOL
            assert left[i] <= TOL + 1e-12 or (fits_mu and left[i] + TOL < work[a] + 1e-12), (
                f"action {a} left waiting units but node {i} still has {left[i]} compute "
                f"for work {work[a]} (mu {ix.mu[i]})"
            )

    np.subtract.at(avail, ix.route_src_pair, control.route)
    assert (avail >= 0).all()
    load = np.zeros(ix.num_links, dtype=np.int64)
    np.add.at(load, ix.route_link, control.route)
    for r in np.flatnonzero(route_s > 0).tolist():
        e = ix.route_link[r]
        assert avail[ix.route_src_pair[r]] == 0 or load[e] == ix.link_capacity[e], (
            f"route {r} left units waiting on link {e} with spare capacity"
        )


@settings(max_examples=80, **SETTINGS)
@given(scenarios())
def test_projection__every_control_feasible(scenario):
    wl = scenario.workload
    sim = Simulator(wl, memory=scenario.memory, check_invariants=True)
    sim.reset(scenario.seed)
    for scores in scenario.scores:
        before = snapshot(sim)
        control = sim.project(scores)
        assert snapshot(sim) == before, "the projection changed the state"
        checked = check_control(wl, sim.state, control, memory=scenario.memory)
        _assert_projection_follows_spec(
            wl, sim.state, scores, control, np.asarray(checked.hit, dtype=np.int64), scenario.memory
        )
        outcome = sim.step(control)  # validates again and asserts SPEC 6's invariants
        assert outcome.started == len(checked.start)
        assert outcome.routed == int(control.route.sum())
        assert outcome.transfers == len(control.transfers)


# Regression: project() fills capacities by subtraction (``(left + EPS) // w``), while
# check_control() sums what was taken; amounts that fill mu (or a link's transfer
# bandwidth) to within EPS once gave a projected control that step() rejected. The check
# now allows CHECK_TOLERANCE, far above any rounding and far below any real excess.


def _boundary_pair(capacity: float, first: float, ulps: int) -> tuple[float, float]:
    """``first`` and a second amount that brings the sum to ``capacity + EPS``, give or take
    a few ulps."""
    second = (capacity - first) + TOL
    for _ in range(abs(ulps)):
        second = float(np.nextafter(second, np.inf if ulps > 0 else -np.inf))
    return first, second


@settings(max_examples=40, **SETTINGS)
@example(capacity=0.7, first=0.4194413388142813, ulps=0)
@given(
    capacity=st.sampled_from([0.7, 1.0, 1.5, 2.0, 3.0]),
    first=st.floats(0.05, 0.65),
    ulps=st.integers(-3, 3),
)
def test_projection__feasible_when_service_fills_mu_within_tolerance(capacity, first, ulps):
    w1, w2 = _boundary_pair(capacity, first, ulps)
    wl = Workload(
        name="mu_boundary",
        nodes=(Node("n0", "server", mu=capacity),),
        links=(),
        commodities=(Commodity("c0"), Commodity("c1")),
        signatures=(),
        actions=(
            Action(node=0, commodity=0, work_hit=w1, work_miss=w1),
            Action(node=0, commodity=1, work_hit=w2, work_miss=w2),
        ),
        arrival_mix=((0, 0, 0.5), (0, 1, 0.5)),
        lambda_ref=1.0,
        load=0.0,
    )
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.add_units(0, 0, 1)
    sim.add_units(0, 1, 1)
    control = sim.project(np.array([1.0, 0.5]))
    check_control(wl, sim.state, control)
    sim.step(control)


@settings(max_examples=40, **SETTINGS)
@example(capacity=0.7, first=0.44752682474168387, ulps=0)
@given(
    capacity=st.sampled_from([0.7, 1.0, 1.5, 2.0, 3.0]),
    first=st.floats(0.05, 0.65),
    ulps=st.integers(-3, 3),
)
def test_projection__feasible_when_transfers_fill_bandwidth_within_tolerance(capacity, first, ulps):
    s1, s2 = _boundary_pair(capacity, first, ulps)
    wl = Workload(
        name="bandwidth_boundary",
        nodes=(Node("a", "server", mu=1.0, budget=10.0), Node("b", "server", mu=1.0, budget=10.0)),
        links=(Link(0, 1, capacity=1, bandwidth=capacity),),
        commodities=(Commodity("c0"),),
        signatures=(Signature("x", s1), Signature("y", s2)),
        actions=tuple(Action(node=i, commodity=0, signature=s) for i in (0, 1) for s in (0, 1)),
        arrival_mix=((0, 0, 1.0),),
        lambda_ref=1.0,
        load=0.0,
        initial_memory=(((0, 0), (0, 1)),),
    )
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    scores = np.full(wl.index.num_scores, -1.0)
    scores[wl.index.score_slices[2]] = [1.0, 0.5]  # move x, then y, along a -> b
    control = sim.project(scores)
    check_control(wl, sim.state, control)
    sim.step(control)


# ---------------------------------------------------------------------------------------
# 6. Infeasible controls are rejected and leave the state unchanged
# ---------------------------------------------------------------------------------------
def _infeasible_variants(
    wl: Workload, state, control: Control, hit: list[int], memory: bool, pick: random.Random
):
    """``(label, control, allowed constraint names)`` perturbations of a feasible control."""
    ix, fx = wl.index, wl.index.fast
    out = []
    route, service, start = control.route, control.service, control.start

    def with_(**kw) -> Control:
        return replace(control, **kw)

    # Shapes.
    out.append(("route too long", with_(route=np.append(route, 0)), {"shape"}))
    out.append(("route 2-D", with_(route=route.reshape(1, -1)), {"shape"}))
    out.append(("service too short", with_(service=service[:-1]), {"shape"}))
    out.append(("start too long", with_(start=np.append(start, -1)), {"shape"}))
    out.append(("retain too long", with_(retain=np.append(control.retain, 0.0)), {"shape"}))
    out.append(("transfers 2-D", with_(transfers=control.transfers.reshape(1, -1)), {"shape"}))

    # Amounts.
    queue = state.queue_len
    taken = np.zeros(ix.num_pairs, dtype=np.int64)
    np.add.at(taken, ix.route_src_pair, route)
    np.add.at(taken, ix.action_pair, service)
    for a in start[start >= 0].tolist():
        taken[ix.action_pair[a]] += 1
    if ix.num_routes:
        r = pick.randrange(ix.num_routes)
        bad = route.copy()
        bad[r] = -1
        out.append(("negative route", with_(route=bad), {"nonnegativity"}))
        frac = route.astype(np.float64)
        frac[r] += 0.5
        out.append(("fractional route", with_(route=frac), {"integrality"}))
        p, e = ix.route_src_pair[r], ix.route_link[r]
        bad = route.copy()
        bad[r] += queue[p] - taken[p] + 1
        out.append(("route more than the queue", with_(route=bad), {"queue", "link capacity"}))
        load = int(route[ix.route_link == e].sum())
        bad = route.copy()
        bad[r] += ix.link_capacity[e] - load + 1
        out.append(("route over link capacity", with_(route=bad), {"link capacity", "queue"}))
    a = pick.randrange(ix.num_actions)
    bad = service.copy()
    bad[a] = -1
    out.append(("negative service", with_(service=bad), {"nonnegativity"}))
    frac = service.astype(np.float64)
    frac[a] += 0.25
    out.append(("fractional service", with_(service=frac), {"integrality"}))

    spent = np.zeros(ix.num_nodes)
    busy = state.service_action >= 0
    spent[busy] = np.minimum(ix.mu[busy], state.service_residual[busy])
    for b, n in enumerate(service.tolist()):
        spent[fx.action_node[b]] += n * fx.work[hit[b]][b]
    i, w = fx.action_node[a], fx.work[hit[a]][a]
    if w > 0:
        extra = math.floor((fx.mu[i] + 1e-6 - spent[i]) / w) + 1
        bad = service.copy()
        bad[a] += max(extra, 1)
        out.append(
            (
                "serve more work than mu",
                with_(service=bad),
                {"compute capacity", "queue", "multi-slot start"},
            )
        )

    # Starts.
    i = pick.randrange(ix.num_nodes)
    bad = start.copy()
    bad[i] = ix.num_actions
    out.append(("start an unknown action", with_(start=bad), {"start action"}))
    bad = start.copy()
    bad[i] = -2
    out.append(("start action -2", with_(start=bad), {"start action"}))
    others = np.flatnonzero(ix.action_node != i)
    if others.size:
        bad = start.copy()
        bad[i] = int(others[pick.randrange(others.size)])
        out.append(("start another node's action", with_(start=bad), {"start action"}))
    for i in range(ix.num_nodes):
        if start[i] >= 0:
            continue
        left = fx.mu[i] - spent[i]
        for b in np.flatnonzero(ix.action_node == i).tolist():
            wb = fx.work[hit[b]][b]
            # only a unit whose work exceeds mu starts, and only with compute left
            if left <= 1e-12 or wb <= fx.mu[i] - 1e-6:
                bad = start.copy()
                bad[i] = b
                out.append(
                    (
                        "start a unit that fits in mu (or with no compute)",
                        with_(start=bad),
                        {"multi-slot start", "queue"},
                    )
                )
                break

    # Transfers.
    transfers = control.transfers.tolist()
    if not memory:
        out.append(
            ("transfer in no-memory mode", with_(transfers=np.array([0])), {"no-memory mode"})
        )
        out.append(
            (
                "transfer index out of range, no memory",
                with_(transfers=np.array([ix.num_transfers])),
                {"no-memory mode"},
            )
        )
    else:
        out.append(
            (
                "transfer index out of range",
                with_(transfers=np.array(transfers + [ix.num_transfers])),
                {"candidate range"},
            )
        )
        out.append(
            (
                "negative transfer index",
                with_(transfers=np.array(transfers + [-1])),
                {"candidate range"},
            )
        )
        if transfers:
            out.append(
                (
                    "object moved twice",
                    with_(transfers=np.array(transfers + [transfers[0]])),
                    {"object moves at most once", "one replica per node"},
                )
            )
        holder = state.holder
        moving = {(fx.link_src[fx.transfer_link[k]], fx.transfer_signature[k]) for k in transfers}
        arriving = {(fx.link_dst[fx.transfer_link[k]], fx.transfer_signature[k]) for k in transfers}
        bandwidth = ix.link_bandwidth.copy()
        after = holder.copy()
        for k in transfers:
            e, s = fx.transfer_link[k], fx.transfer_signature[k]
            bandwidth[e] -= fx.signature_size[s]
            after[fx.link_dst[e], s], after[fx.link_src[e], s] = holder[fx.link_src[e], s], -1
        used = (after >= 0) @ ix.signature_size
        found = set()
        for k in range(ix.num_transfers):
            e, s = fx.transfer_link[k], fx.transfer_signature[k]
            src, dst = fx.link_src[e], fx.link_dst[e]
            if holder[src, s] < 0 and "source" not in found:
                found.add("source")
                out.append(
                    (
                        "transfer of an object the source lacks",
                        with_(transfers=np.array(transfers + [k])),
                        {"transfer source"},
                    )
                )
            elif holder[src, s] >= 0 and holder[dst, s] >= 0 and "dest" not in found:
                found.add("dest")
                out.append(
                    (
                        "transfer to a node that holds the signature",
                        with_(transfers=np.array(transfers + [k])),
                        {"one replica per node", "object moves at most once"},
                    )
                )
            elif (
                holder[src, s] >= 0
                and holder[dst, s] < 0
                and (src, s) not in moving
                and (dst, s) not in arriving
                and "size" not in found
            ):
                size = fx.signature_size[s]
                if size > bandwidth[e] + 1e-6 or used[dst] + size > fx.budget[dst] + 1e-6:
                    found.add("size")
                    out.append(
                        (
                            "transfer over bandwidth or budget",
                            with_(transfers=np.array(transfers + [k])),
                            {"transfer bandwidth", "memory budget"},
                        )
                    )

    # Retention priorities.
    if ix.num_retains:
        for value in (np.nan, np.inf):
            bad = control.retain.copy()
            bad[pick.randrange(ix.num_retains)] = value
            out.append((f"retain priority {value}", with_(retain=bad), {"finite priorities"}))
    return out


@settings(max_examples=50, **SETTINGS)
@given(scenarios())
def test_check_control__perturbed_controls_rejected_and_state_unchanged(scenario):
    wl = scenario.workload
    pick = random.Random(scenario.seed)
    sim = Simulator(wl, memory=scenario.memory, check_invariants=True)
    sim.reset(scenario.seed)
    for scores in scenario.scores:
        control = sim.project(scores)
        hit = check_control(wl, sim.state, control, memory=scenario.memory).hit
        before = snapshot(sim)
        variants = _infeasible_variants(wl, sim.state, control, hit, scenario.memory, pick)
        assert len(variants) >= 6
        for label, bad, allowed in variants:
            with pytest.raises(InfeasibleControlError) as direct:
                check_control(wl, sim.state, bad, memory=scenario.memory)
            assert direct.value.constraint in allowed, (label, str(direct.value))
            assert snapshot(sim) == before, f"check_control changed the state ({label})"
            with pytest.raises(InfeasibleControlError) as stepped:
                sim.step(bad)
            assert stepped.value.constraint == direct.value.constraint, label
            assert snapshot(sim) == before, f"a rejected step changed the state ({label})"
        sim.step(control)  # the unperturbed control is still accepted


def test_check_control__infeasible_error_is_a_value_error():
    assert issubclass(InfeasibleControlError, ValueError)
    wl = make_workload("work_reuse")
    sim = Simulator(wl)
    sim.reset(0)
    bad = replace(Control.idle(wl), service=np.array([1]))  # the queue is empty at t = 0
    with pytest.raises(ValueError, match="queue"):
        sim.step(bad)


# ---------------------------------------------------------------------------------------
# 7. No-memory mode
# ---------------------------------------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(scenarios(memory=False))
def test_no_memory__never_holds_objects_and_every_unit_misses(scenario):
    wl = scenario.workload
    ix = wl.index
    sim = Simulator(wl, memory=False)
    sim.reset(scenario.seed)
    assert (sim.state.holder < 0).all() and (sim.state.owner < 0).all()
    for sim_, _scores, control, outcome in run(scenario):
        state = sim_.state
        assert (state.holder < 0).all(), "the no-memory system holds an object"
        assert (state.owner < 0).all()
        assert not state.memory_used.any()
        assert (state.service_hit == 0).all()
        assert len(control.transfers) == 0
        assert outcome.hits == 0
        assert outcome.insertions == outcome.evictions == outcome.transfers == 0
        assert outcome.generated == () and outcome.evicted == ()
        assert outcome.penalty_memory == 0.0
        # every completed unit is charged the miss penalty
        expected = float(outcome.served_by_action @ ix.penalty[0])
        assert outcome.penalty_compute == pytest.approx(expected, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------------------------------
# 8. Determinism
# ---------------------------------------------------------------------------------------
def _trajectory(sim: Simulator, scenario: Scenario) -> list:
    sim.reset(scenario.seed)
    steps = [snapshot(sim)]
    for scores in scenario.scores:
        control, outcome = sim.step_scores(scores)
        steps.append((control_tuple(control), outcome_dict(outcome), snapshot(sim)))
    return steps


@settings(max_examples=40, **SETTINGS)
@given(scenarios(min_slots=2))
def test_determinism__same_seed_and_scores_same_trajectory(scenario):
    wl = scenario.workload
    first = Simulator(wl, memory=scenario.memory, check_invariants=True)
    reference = _trajectory(first, scenario)
    # a fresh simulator, without invariant checks, reproduces it exactly ...
    second = Simulator(wl, memory=scenario.memory, check_invariants=False)
    assert _trajectory(second, scenario) == reference
    # ... and so does resetting a used simulator (reset forgets everything)
    assert _trajectory(first, scenario) == reference
