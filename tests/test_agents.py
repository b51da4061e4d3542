"""Scripted agents: registry, feasibility, memory-obliviousness, and the paper's claims
(SPEC section 6) as statistical checks with fixed seeds and stated tolerances."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import Simulator, make_workload
from mabp_gym.agents import POLICIES, make_policy
from mabp_gym.agents.mabp import MABP, Primitives
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.metrics import Trace, summarize

SCRIPTED = [p for p in POLICIES if p not in ("gnn", "learn-mabp", "residual-mabp")]
ANYWHERE = ("residual-mabp-any", "residual-frame-mabp")
"""Learned policies whose one shipped checkpoint runs on every network (they need torch to
read it)."""


def run(
    policy: str, workload, seed: int, *, memory: bool = True, slots: int | None = None, **policy_kw
) -> Trace:
    sim = Simulator(workload, memory=memory, check_invariants=True)
    sim.reset(seed)
    encoder = ObservationEncoder(workload, memory=memory)
    agent = make_policy(policy, workload, memory=memory, **policy_kw)
    agent.reset(seed)
    trace = Trace()
    for _ in range(slots or workload.horizon):
        _, outcome = sim.step_scores(agent.scores(encoder.encode(sim.state)))
        trace.record(outcome)
    return trace


def seed_mean(policy, workload, seeds, **kw) -> dict[str, float]:
    summaries = [summarize(run(policy, workload, s, **kw)) for s in seeds]
    return {key: float(np.mean([s[key] for s in summaries])) for key in summaries[0]}


# -- registry and contract -------------------------------------------------------------------
def test_registry__lists_every_scripted_policy_of_spec_4():
    for name in (
        "sp",
        "jsq",
        "bp",
        "cost-bp",
        "greedycache-bp",
        "mabp",
        "mabp-no-transition",
        "mabp-no-reuse",
        "mabp-no-retention",
        "oracle-sur",
    ):
        assert name in POLICIES
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy("nope", "mixed")
    with pytest.raises(ValueError, match="nu must be"):
        make_policy("mabp", "mixed", nu=-1)


def test_make_policy__accepts_an_env_and_takes_its_settings():
    import gymnasium as gym

    env = gym.make("mabp_gym/Mixed-v0", nu=2.0, memory=False)
    policy = make_policy("mabp", env)
    assert policy.nu == 2.0 and policy.memory is False
    obs, _ = env.reset(seed=0)
    scores = policy.scores(obs)
    assert scores.shape == env.action_space.shape and np.all(np.isfinite(scores))
    env.step(scores)


@pytest.mark.parametrize("policy", SCRIPTED)
def test_agents__every_control_is_feasible_on_every_workload(policy):
    if policy in ANYWHERE:
        pytest.importorskip("torch", reason=f"{policy} reads its checkpoint with torch")
    for name in ("mixed", "boundary", "successor", "work_reuse", "separation"):
        wl = make_workload(name, load=0.7)
        trace = run(policy, wl, seed=1, slots=60)  # invariants and feasibility checked
        assert len(trace.backlog) == 60


@pytest.mark.parametrize("policy", ["sp", "jsq", "bp", "cost-bp"])
def test_memory_oblivious_agents__scores_ignore_the_memory_state(policy):
    wl = make_workload("mixed", load=0.6)
    sim = Simulator(wl)
    sim.reset(3)
    encoder = ObservationEncoder(wl)
    agent = make_policy(policy, wl)
    agent.reset(3)
    mabp = make_policy("mabp", wl)
    for _ in range(40):
        sim.step_scores(agent.scores(encoder.encode(sim.state)))
    obs = encoder.encode(sim.state)
    swapped = dict(obs)
    rng = np.random.default_rng(0)
    swapped["memory"] = rng.permutation(obs["memory"].ravel()).reshape(obs["memory"].shape)
    swapped["service"] = obs["service"].copy()
    swapped["service"][:, 2] = 1.0 - obs["service"][:, 2]  # every hit bit flipped
    swapped["service"][:, 0] = np.where(
        swapped["service"][:, 2] > 0, wl.index.work[1], wl.index.work[0]
    )
    a, b = agent.scores(obs), agent.scores(swapped)
    assert np.array_equal(a[agent.slices[0]], b[agent.slices[0]])
    assert np.array_equal(a[agent.slices[1]], b[agent.slices[1]])
    # ... whereas MABP's service scores do move with the memory state.
    assert not np.array_equal(
        mabp.scores(obs)[: wl.index.num_actions], mabp.scores(swapped)[: wl.index.num_actions]
    )


# -- the paper's claims ------------------------------------------------------------------------
# "stable" is SPEC 9.2's growth verdict (backlog slope / arrival rate < 1.5% per seed, the
# fraction of seeds that pass here); every "unstable" case below drifts at >= 0.1 units per
# slot, several times the limit. Near a bound the verdict needs long runs: 3,000 slots.


@pytest.mark.slow
@pytest.mark.parametrize("kappa_w", [2.0, 4.0, 8.0])
def test_work_reuse__mabp_stable_at_0_9_kappa_and_no_memory_unstable_at_1_2(kappa_w):
    wl = make_workload("work_reuse", kappa_w=kappa_w, load=0.9, horizon=1000)
    mabp = seed_mean("mabp", wl, seeds=[0, 1, 2])
    assert mabp["stable"] == 1.0 and mabp["mean_backlog"] < 120
    assert mabp["hit_ratio"] > 0.99
    # lambda = 1.2 requests/slot against a no-memory capacity of 1: drift 0.2 units/slot.
    over = make_workload("work_reuse", kappa_w=kappa_w, load=1.2 / kappa_w, horizon=1000)
    bp = seed_mean("bp", over, seeds=[0, 1, 2], memory=False)
    assert bp["slope"] > 0.1 and bp["stable"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mu_u", "mu_v", "pi_h", "pi_l"),
    [(2.0, 1.0, 1.0, 0.0), (3.0, 1.0, 0.9, 0.2), (2.0, 1.5, 1.0, 0.5)],
)
def test_successor__memory_bound_holds_for_mabp_and_no_memory_bound_breaks(mu_u, mu_v, pi_h, pi_l):
    with_memory = min(mu_u, mu_v / pi_l if pi_l else np.inf)
    no_memory = min(mu_u, mu_v / pi_h)
    # 3,000 slots: at 0.9 of a bound the growth verdict (SPEC 9.2) needs long runs.
    params = dict(mu_u=mu_u, mu_v=mu_v, pi_h=pi_h, pi_l=pi_l, horizon=3000)
    wl = make_workload("successor", load=0.9, **params)  # 0.9 of the memory bound
    assert wl.total_rate == pytest.approx(0.9 * with_memory)
    mabp = seed_mean("mabp", wl, seeds=[0, 1, 2])
    assert mabp["stable"] == 1.0, mabp
    # Just over the no-memory bound: 1.15 x, drift >= 0.15 units/slot at the bottleneck.
    over = make_workload("successor", load=1.15 * no_memory / with_memory, **params)
    bp = seed_mean("bp", over, seeds=[0, 1, 2], memory=False)
    assert bp["slope"] > 0.1 and bp["stable"] == 0.0, bp


@pytest.mark.parametrize("K", [1, 4, 8, 16])
def test_separation__bp_minus_mabp_penalty_gap_is_k_minus_1_over_2(K):
    # Paired episodes flip which action is compatible (seed parity). Every served unit pays
    # exactly 1 or K (no reuse credit, no memory or link costs), so the per-request
    # penalty has no sampling error: the tolerance is only floating point.
    wl = make_workload("separation", K=K, load=0.5, horizon=400)
    gaps = []
    for pair in (0, 2, 4):
        bp = np.mean([summarize(run("bp", wl, s), warmup=0.0)["penalty"] for s in (pair, pair + 1)])
        mabp = np.mean(
            [summarize(run("mabp", wl, s), warmup=0.0)["penalty"] for s in (pair, pair + 1)]
        )
        assert mabp == pytest.approx(1.0, abs=1e-9)
        gaps.append(bp - mabp)
    assert np.mean(gaps) == pytest.approx((K - 1) / 2, abs=1e-9)


def test_mixed__mabp_hit_ratio_beats_bp():
    # At a load both policies carry (0.3), three seeds; the margin must exceed three
    # standard errors of the seed-mean difference.
    wl = make_workload("mixed", load=0.3, horizon=600)
    seeds = [0, 1, 2]
    mabp = [summarize(run("mabp", wl, s))["hit_ratio"] for s in seeds]
    bp = [summarize(run("bp", wl, s))["hit_ratio"] for s in seeds]
    diff = np.array(mabp) - np.array(bp)
    stderr = diff.std(ddof=1) / np.sqrt(len(seeds))
    assert diff.mean() > 0.03 and diff.mean() > 3 * stderr, (mabp, bp)


@pytest.mark.slow
def test_mixed__mabp_carries_a_load_where_bp_is_unstable():
    wl = make_workload("mixed", load=0.5, horizon=600)
    mabp = seed_mean("mabp", wl, seeds=[0, 1])
    bp = seed_mean("bp", wl, seeds=[0, 1])
    assert mabp["stable"] == 1.0 and bp["stable"] == 0.0
    assert mabp["p95_delay"] < 0.5 * bp["p95_delay"]
    assert mabp["hit_ratio"] > bp["hit_ratio"]


def test_ablations__differ_from_mabp_only_in_their_term():
    wl = make_workload("mixed", load=0.6)
    ix = wl.index
    rng = np.random.default_rng(0)
    queues = np.zeros((ix.num_nodes, ix.num_commodities))
    queues[ix.pair_node, ix.pair_commodity] = rng.integers(0, 20, ix.num_pairs)
    full = make_policy("mabp", wl)
    no_transition = make_policy("mabp-no-transition", wl)
    no_reuse = make_policy("mabp-no-reuse", wl)
    w = full.weights(queues)
    # Dropping the successor pressure adds exactly sum_c' P(c'|a, Y) Q_i^c' back.
    pressure = np.einsum("hac,ac->ha", ix.successor_law[:, :, :-1], queues[ix.action_node])
    assert np.allclose(no_transition.weights(queues), w + pressure)
    assert pressure.max() > 0
    # Dropping the reuse credit raises the hit penalty by nu * eta * v.
    assert np.allclose(no_reuse.weights(queues) - w, -full.nu * wl.eta * ix.credit)
    assert (ix.credit[1] > 0).any()
    # no-retention keeps MABP's service and routing scores and changes only memory.
    sim = Simulator(wl)
    sim.reset(0)
    encoder = ObservationEncoder(wl)
    for _ in range(50):
        sim.step_scores(full.scores(encoder.encode(sim.state)))
    obs = encoder.encode(sim.state)
    a = make_policy("mabp", wl).scores(obs)
    b = make_policy("mabp-no-retention", wl).scores(obs)
    service, route, transfer, retain = ix.score_slices
    assert np.array_equal(a[service], b[service]) and np.array_equal(a[route], b[route])
    assert not np.array_equal(a[retain], b[retain])
    assert (b[transfer] < 0).all()


# -- explicit primitives ---------------------------------------------------------------------
def test_primitives__known_are_the_workloads_and_no_reuse_takes_the_loss():
    ix = make_workload("mixed").index
    known = Primitives.known(ix)
    assert np.array_equal(known.work, ix.work) and np.array_equal(known.penalty, ix.penalty)
    assert np.array_equal(known.law, ix.successor_law[:, :, :-1])
    assert np.array_equal(Primitives.known(ix, reuse=False).penalty, ix.loss)
    assert not np.array_equal(ix.loss, ix.penalty)


def test_mabp__explicit_primitives_are_the_ones_it_scores_with():
    wl = make_workload("mixed", load=0.6)
    ix = wl.index
    sim = Simulator(wl)
    sim.reset(2)
    encoder = ObservationEncoder(wl)
    default = MABP(wl)
    explicit = MABP(wl, primitives=Primitives.known(ix))
    no_reuse = MABP(wl, reuse=False)
    explicit_no_reuse = MABP(wl, primitives=Primitives.known(ix, reuse=False))
    doubled = MABP(
        wl, primitives=Primitives(2.0 * ix.work, ix.penalty, ix.successor_law[:, :, :-1])
    )
    for _ in range(40):
        obs = encoder.encode(sim.state)
        scores = default.scores(obs)
        assert np.array_equal(explicit.scores(obs), scores)
        assert np.array_equal(explicit_no_reuse.scores(obs), no_reuse.scores(obs))
        service = ix.score_slices[0]
        twice = doubled.scores(obs)[service]
        busy = scores[service] != -1.0  # an empty queue scores -1 whatever the work
        assert np.allclose(twice[busy], scores[service][busy] / 2.0)
        sim.step_scores(scores)
    assert default.primitives.work is ix.work


def test_primitives__bad_arrays_are_refused_with_what_was_wrong():
    ix = make_workload("mixed").index
    law = ix.successor_law[:, :, :-1]
    with pytest.raises(ValueError, match="work must have shape"):
        Primitives(ix.work[0], ix.penalty, law)
    with pytest.raises(ValueError, match="penalty must have the shape"):
        Primitives(ix.work, ix.penalty[:, :-1], law)
    with pytest.raises(ValueError, match="law must have shape"):
        Primitives(ix.work, ix.penalty, law[:, :-1])
    with pytest.raises(ValueError, match="work must be finite"):
        Primitives(np.full_like(ix.work, np.nan), ix.penalty, law)
    with pytest.raises(ValueError, match="work must be >= 0"):
        Primitives(-ix.work - 1.0, ix.penalty, law)
    with pytest.raises(ValueError, match="successor law row"):
        Primitives(ix.work, ix.penalty, law + 1.0)
    other = make_workload("separation").index
    with pytest.raises(ValueError, match="do not fit"):
        MABP(make_workload("mixed"), primitives=Primitives.known(other))
    with pytest.raises(TypeError, match="primitives must be a Primitives"):
        MABP(make_workload("mixed"), primitives=(ix.work, ix.penalty, law))


def test_mabp__object_values_are_the_retain_scores_before_sizing():
    wl = make_workload("mixed", load=0.8)
    ix = wl.index
    sim = Simulator(wl)
    sim.reset(1)
    encoder = ObservationEncoder(wl)
    mabp = MABP(wl)
    assert mabp.object_values is None
    size = ix.signature_size[ix.retain_signature]
    for _ in range(30):
        scores = mabp.scores(encoder.encode(sim.state))
        assert np.array_equal(
            scores[ix.score_slices[3]], mabp.object_values / size - mabp.holding_cost
        )
        sim.step_scores(scores)
    assert mabp.object_values.max() > 0
    no_retention = MABP(wl, retention=False)
    no_retention.scores(encoder.encode(sim.state))
    assert no_retention.object_values is None
    mabp.reset(0)
    assert mabp.object_values is None
    queues = np.asarray(encoder.encode(sim.state)["queues"], dtype=np.float64)
    assert np.array_equal(
        mabp.route_weights(queues), mabp.scores(encoder.encode(sim.state))[ix.score_slices[1]]
    )


def test_random_policy__is_seeded_per_episode_and_scores_in_the_box():
    workload = make_workload("mixed", load=0.3)
    sim = Simulator(workload)
    sim.reset(0)
    obs = ObservationEncoder(workload).encode(sim.state)
    policy = make_policy("random", workload)
    policy.reset(4)
    first = [policy.scores(obs) for _ in range(3)]
    policy.reset(4)
    again = [policy.scores(obs) for _ in range(3)]
    policy.reset(5)
    other = policy.scores(obs)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0], other) and not np.array_equal(first[0], first[1])
    assert first[0].shape == (workload.index.num_scores,)
    assert np.all(np.abs(np.concatenate(first)) < 1.0)


@pytest.mark.parametrize("name", ["bp", "mabp", "cost-bp", "jsq"])
def test_scores__a_flat_or_another_workloads_observation_is_refused_by_name(name):
    import gymnasium as gym

    flat, _ = gym.make("mabp_gym/Mixed-v0", obs_mode="flat").reset(seed=0)
    other, _ = gym.make("mabp_gym/Rag-v0").reset(seed=0)
    policy = make_policy(name, "mixed")
    with pytest.raises(ValueError, match=r"reads the env's dict observation .* got ndarray"):
        policy.scores(flat)
    with pytest.raises(ValueError, match=r"made for 'mixed' .* another workload's"):
        policy.scores(other)


def test_make_policy__nu_and_memory_are_checked_not_coerced():
    """``memory="no"`` was read as True, ``nu="5"`` failed inside numpy."""
    for kw, message in (
        ({"nu": "5"}, "nu must be a finite number >= 0, got '5'"),
        ({"nu": True}, "nu must be a finite number"),
        ({"memory": "no"}, "memory must be True or False, got 'no'"),
    ):
        with pytest.raises(ValueError, match=message):
            make_policy("mabp", "mixed", **kw)
    assert make_policy("mabp", "mixed", nu=np.float32(2.0), memory=np.bool_(False)).nu == 2.0


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        # Each was a bare Python error (int() of 'a', OverflowError, a '<=' TypeError).
        ("frame-mabp", {"frame": "a"}, "frame (slots): must be a number, got 'a'"),
        ("frame-mabp", {"frame": float("inf")}, "frame (slots): must be finite"),
        ("frame-mabp", {"frame": 2.5}, "frame (slots): must be an integer"),
        ("frame-mabp", {"slack": "a"}, "slack: must be a number"),
        ("frame-mabp", {"slack": 1.5}, "slack: must be <= 1"),
        ("frame-mabp", {"smoothing": "a"}, "smoothing (slots): must be a number"),
        ("frame-mabp", {"switch": 0.5}, "switch: must be >= 1"),
        ("mabp", {"horizon": "a"}, "horizon: must be a number"),
        ("mabp", {"horizon": 10**9}, "horizon: must be <= 100000"),  # a 150 s loop before
        ("mabp", {"evidence": 0.5}, "evidence (slots): must be >= 1"),
        ("learn-mabp", {"checkpoint": 123}, "checkpoint must be a file path, got 123"),
        ("residual-mabp", {"checkpoint": 123}, "checkpoint must be a file path, got 123"),
        # A keyword no policy takes: a bare TypeError from the base class before.
        ("mabp", {"foo": 1}, "policy 'mabp' does not take that argument"),
        ("bp", {"frame": 3}, "policy 'bp' does not take that argument"),
    ],
)
def test_make_policy__a_bad_keyword_value_is_named(name, kwargs, message):
    if name in ("learn-mabp", "residual-mabp"):
        pytest.importorskip("torch", reason="the learned policies need the learn extra")
    with pytest.raises(ValueError) as caught:
        make_policy(name, "mixed", **kwargs)
    assert message in str(caught.value)


def test_constant__scores_every_candidate_alike_and_refuses_values_out_of_range():
    from mabp_gym import evaluate

    policy = make_policy("constant", "mixed")
    from mabp_gym.envs.env import SFMSNEnv

    obs = SFMSNEnv(workload="mixed", load=0.3).reset(seed=0)[0]
    assert np.all(policy.scores(obs) == 0.5)
    assert np.all(make_policy("constant", "mixed", value=-0.25).scores(obs) == -0.25)
    for bad, kind in ((1.5, ValueError), ("0.5", TypeError), (True, TypeError)):
        with pytest.raises(kind, match="constant: value"):
            make_policy("constant", "mixed", value=bad)
    # Serving everything in the projection's order is stable at a light load; switching
    # everything off (a negative score) serves nothing.
    (on,) = evaluate("constant", "mixed", [0.3], [0], horizon=600)
    (off,) = evaluate("constant", "mixed", [0.3], [0], horizon=600, policy_kw={"value": -0.5})
    assert on["stable"] and on["completion_ratio"] > 0.9
    assert off["completion_ratio"] == 0.0
