"""The documented per-candidate SB3 policy (mabp_gym.envs.sb3.GraphActorCriticPolicy)."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

LEARNING = "needs the learning stack: pip install torch==2.13.0 && pip install -e '.[dev]'"
torch = pytest.importorskip("torch", reason=LEARNING)
pytest.importorskip("stable_baselines3", reason=LEARNING)
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import mabp_gym  # noqa: E402, F401
from mabp_gym.core.projection import project  # noqa: E402
from mabp_gym.envs.sb3 import GNNActorCriticPolicy, GraphActorCriticPolicy  # noqa: E402

MULTIHOP = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
SHAPES = ["mixed", "rag", "agentic", MULTIHOP]


def _env(workload: str, horizon: int = 40, **kw) -> gym.Env:
    return gym.make(
        "mabp_gym/SFMSN-v0", workload=workload, horizon=horizon, max_episode_steps=horizon, **kw
    )


def _policy(env: gym.Env, seed: int = 0) -> GraphActorCriticPolicy:
    torch.manual_seed(seed)
    return GraphActorCriticPolicy(env.observation_space, env.action_space, lambda _: 3e-4)


def _means(policy: GraphActorCriticPolicy, obs: dict) -> torch.Tensor:
    tensors, _ = policy.obs_to_tensor(obs)
    with torch.no_grad():
        return policy.get_distribution(tensors).distribution.mean


@pytest.mark.parametrize("workload", ["mixed", MULTIHOP], ids=["mixed", "multihop14"])
def test_graph_policy__ppo_learns_a_few_hundred_steps(workload):
    torch.set_num_threads(1)
    envs = DummyVecEnv([lambda: _env(workload) for _ in range(2)])
    model = PPO(
        GraphActorCriticPolicy, envs, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu"
    )
    before = {k: p.detach().clone() for k, p in model.policy.named_parameters()}
    model.learn(256)
    assert model.num_timesteps >= 256
    changed = {k for k, p in model.policy.named_parameters() if not torch.equal(before[k], p)}
    # Message passing, the node and link read-outs, the value head and the log-std all
    # learn.
    for part in (
        "net.node_in",
        "net.edge_lin",
        "net.update",
        "net.node_head",
        "net.link_head",
        "net.value",
        "value_net",
        "log_std",
    ):
        assert any(part in k for k in changed), f"{part} was not updated"
    actions, _ = model.predict(envs.reset(), deterministic=True)
    assert actions.shape == (2, envs.action_space.shape[0])


def test_graph_policy__one_state_dict_runs_on_every_workload_shape():
    reference_env = _env("mixed")
    state = _policy(reference_env).state_dict()
    assert state["log_std"].shape == (4,)  # one per kind of candidate
    sizes = set()
    for workload in SHAPES:
        env = _env(workload)
        policy = _policy(env, seed=1)
        policy.load_state_dict(state)  # strict: every parameter has the same shape
        obs, _ = env.reset(seed=0)
        actions, _ = policy.predict(obs, deterministic=True)
        assert actions.shape == env.action_space.shape
        assert np.isfinite(actions).all()
        sizes.add(env.action_space.shape[0])
    assert len(sizes) == len(SHAPES), "the shapes tried have different candidate counts"


def test_graph_policy__for_env_runs_a_saved_model_on_another_workload(tmp_path):
    PPO(GraphActorCriticPolicy, _env("mixed"), n_steps=16, batch_size=16, seed=0).save(
        tmp_path / "mixed.zip"
    )
    trained = PPO.load(tmp_path / "mixed.zip")
    rag = _env("rag")
    with pytest.raises(ValueError, match="Observation spaces do not match"):
        PPO.load(tmp_path / "mixed.zip", env=rag)
    policy = trained.policy.for_env(rag)
    assert type(policy) is type(trained.policy)
    assert policy.observation_space is rag.observation_space
    state = trained.policy.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in policy.state_dict().items())
    obs, _ = rag.reset(seed=0)
    scores, _ = policy.predict(obs, deterministic=True)
    assert scores.shape == rag.action_space.shape and np.isfinite(scores).all()
    vector = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2, workload="rag")
    assert trained.policy.for_env(vector).action_space == rag.action_space
    # The GNN policy's weights are sized by its network: refused by name, not torch's
    # size-mismatch traceback.
    gnn = PPO(GNNActorCriticPolicy, _env("mixed"), n_steps=16, batch_size=16, seed=0).policy
    with pytest.raises(ValueError, match="GNNActorCriticPolicy's weights are sized by the"):
        gnn.for_env(rag)


def test_graph_policy__candidate_mean_reads_that_candidates_own_features():
    env = _env("mixed")
    policy = _policy(env)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)  # the same states every run (an unseeded draw made it flaky)
    for _ in range(20):  # some backlog, so that features are not all zero
        obs, *_ = env.step(env.action_space.sample())
    service, route, _, retain = env.unwrapped.workload.index.score_slices
    slices = {"service": service, "route": route, "retain": retain}
    base = _means(policy, obs)[0]
    for key, part, row in (
        ("service", "service", 7),
        ("route", "route", 11),
        ("retain", "retain", 3),
    ):
        changed_obs = {k: v.copy() for k, v in obs.items()}
        changed_obs[key][row] += 5.0
        diff = (_means(policy, changed_obs)[0] - base).abs()
        start = slices[part].start
        assert diff[start + row] > 1e-6, f"{part} candidate {row} ignores its own features"
        others = torch.ones_like(diff, dtype=torch.bool)
        others[start + row] = False
        # A pooled vector mapped linearly would move every mean; a per-candidate
        # read-out moves only the candidate whose features changed.
        assert diff[others].max() == 0.0


def test_graph_policy__batched_forward_equals_one_observation_at_a_time():
    envs = gym.make_vec(
        "mabp_gym/SFMSN-v0", num_envs=3, workload="rag", horizon=40, max_episode_steps=40
    )
    torch.manual_seed(0)
    policy = GraphActorCriticPolicy(
        envs.single_observation_space, envs.single_action_space, lambda _: 3e-4
    )
    obs, _ = envs.reset(seed=[0, 1, 2])
    for _ in range(5):
        obs, *_ = envs.step(envs.action_space.sample())
    batched = _means(policy, obs)
    assert batched.shape == (3, envs.single_action_space.shape[0])
    for i in range(3):
        one = _means(policy, {k: v[i] for k, v in obs.items()})
        torch.testing.assert_close(batched[i], one[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(batched[0], batched[1])


def test_graph_policy__save_and_load_round_trip(tmp_path):
    env = _env("agentic")
    policy = _policy(env)
    obs, _ = env.reset(seed=0)
    policy.save(str(tmp_path / "policy.pt"))
    loaded = GraphActorCriticPolicy.load(str(tmp_path / "policy.pt"), device="cpu")
    assert loaded.shape_free
    torch.testing.assert_close(_means(loaded, obs), _means(policy, obs))


def test_graph_policy__flat_observations_are_refused_with_a_clear_error():
    env = _env("mixed", obs_mode="flat")
    with pytest.raises(TypeError, match="Dict observation"):
        _policy(env)


def test_readme__ppo_example_runs_as_written_with_a_tiny_budget():
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
        if "GraphActorCriticPolicy" in b
    ]
    assert len(blocks) == 1 and "model.learn(10_000)" in blocks[0]
    assert len(blocks[0].strip().splitlines()) <= 7  # with torch.set_num_threads(1)
    torch.set_num_threads(1)
    namespace: dict = {}
    code = blocks[0].replace("model.learn(10_000)", "model.learn(256)")
    exec(compile(code, "README PPO example", "exec"), namespace)  # noqa: S102
    model = namespace["model"]
    assert model.num_timesteps >= 256
    assert isinstance(model.policy, GraphActorCriticPolicy)


def test_graph_policy__a_fresh_policy_serves_instead_of_idling():
    # The projection acts only on scores > 0: with the default score_bias every mean
    # starts positive (softsign(0.5) = 1/3, the weights are small), so the deterministic
    # policy serves from the first slot; score_bias=0 starts it idling (docs/learning.md).
    env = _env("mixed", load=0.5, diagnostics=True)
    obs, _ = env.reset(seed=0)
    means = _means(_policy(env), obs)
    assert torch.all(means > 0.25) and torch.all(means < 0.45)
    served = 0
    for _ in range(20):
        action = _means(_policy(env), obs).numpy()[0]
        obs, _, _, _, info = env.step(action)
        served += int(np.asarray(info["control"]["service"]).sum())
    assert served > 0
    idle = GraphActorCriticPolicy(
        env.observation_space, env.action_space, lambda _: 3e-4, score_bias=0.0
    )
    assert torch.all(_means(idle, obs).abs() < 0.1)
    with pytest.raises(ValueError, match="score_bias"):
        GraphActorCriticPolicy(
            env.observation_space, env.action_space, lambda _: 3e-4, score_bias=float("nan")
        )


def _masked_batch(env: gym.Env, steps: int = 15) -> tuple[dict, np.ndarray]:
    obs, _ = env.reset(seed=3)
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
    return obs, obs["action_mask"].astype(bool)


@pytest.mark.parametrize("cls", [GraphActorCriticPolicy, GNNActorCriticPolicy])
def test_graph_policy__masked_candidates_change_neither_log_probability_nor_entropy(cls):
    env = _env("mixed", load=0.7)
    torch.manual_seed(0)
    policy = cls(env.observation_space, env.action_space, lambda _: 3e-4)
    obs, mask = _masked_batch(env)
    assert 0 < mask.sum() < mask.size  # some candidates are masked, some active
    tensors, _ = policy.obs_to_tensor(obs)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (1, mask.size)).astype(np.float32)
    moved = actions.copy()
    moved[0, ~mask] = rng.uniform(-50, 50, (~mask).sum())  # only masked candidates change
    with torch.no_grad():
        _, logp, entropy = policy.evaluate_actions(tensors, torch.as_tensor(actions))
        _, logp_moved, entropy_moved = policy.evaluate_actions(tensors, torch.as_tensor(moved))
        changed = actions.copy()
        changed[0, np.flatnonzero(mask)[0]] += 0.5  # an active one changes: it counts
        _, logp_changed, _ = policy.evaluate_actions(tensors, torch.as_tensor(changed))
    assert torch.equal(logp, logp_moved) and torch.equal(entropy, entropy_moved)
    assert not torch.equal(logp, logp_changed)
    # The entropy is that of the active candidates only: D_active Gaussian entropies.
    std = policy.score_log_std().exp()[torch.as_tensor(mask)]
    expected = (0.5 + 0.5 * np.log(2 * np.pi) + torch.log(std)).sum()
    torch.testing.assert_close(entropy[0], expected)
    # Sampled actions of masked candidates are their means (no noise where nothing acts).
    distribution = policy.get_distribution(tensors)
    sample = distribution.get_actions(deterministic=False)[0]
    mean = distribution.distribution.mean[0]
    assert torch.equal(sample[~torch.as_tensor(mask)], mean[~torch.as_tensor(mask)])
    assert not torch.equal(sample[torch.as_tensor(mask)], mean[torch.as_tensor(mask)])


@pytest.mark.parametrize("cls", [GraphActorCriticPolicy, GNNActorCriticPolicy])
def test_graph_policy__rollout_forward_equals_the_distributions_bit_for_bit(cls):
    # SB3's rollouts call the policy without autograd, where it writes the distribution's
    # arithmetic out (fewer operations): the same draws, values and log-probabilities.
    env = _env("mixed", load=0.7)
    torch.manual_seed(0)
    policy = cls(env.observation_space, env.action_space, lambda _: 3e-4)
    with torch.no_grad():
        policy.log_std.add_(torch.linspace(-0.5, 0.5, policy.log_std.numel()))
    obs, mask = _masked_batch(env)
    later, _ = _masked_batch(env, steps=25)
    rows = [obs, obs, later]  # two equal rows (two draws), one other
    batch = {key: np.stack([row[key] for row in rows]) for key in obs}
    as_buffer = {key: value.astype(np.float32) for key, value in batch.items()}  # SB3's buffer
    single = {key: value[2:] for key, value in batch.items()}
    for given in (batch, as_buffer, single):
        tensors, _ = policy.obs_to_tensor(given)
        for deterministic in (False, True):
            torch.manual_seed(7)
            with torch.no_grad():
                actions, values, logp = policy(tensors, deterministic)
            # Ordinary tensors, though computed in inference mode: a rollout callback may
            # change them in place or use them with autograd.
            assert not any(t.is_inference() for t in (actions, values, logp))
            after = torch.rand(1)  # the global generator moved as the distribution moves it
            torch.manual_seed(7)
            with torch.no_grad():
                distribution, latent = policy._masked(tensors)
                expected = distribution.get_actions(deterministic=deterministic)
                assert torch.equal(actions, expected)
                assert torch.equal(values, policy.value_net(latent))
                assert torch.equal(logp, distribution.log_prob(expected))
            assert torch.equal(after, torch.rand(1))
            if len(actions) == 3:
                active = torch.as_tensor(mask)
                means = distribution.distribution.mean
                assert torch.equal(actions[:2, ~active], means[:2, ~active])
                assert deterministic or not torch.equal(actions[0], actions[1])  # two draws
    # With autograd (PPO's updates) it is the distribution's path, gradients and all; the
    # policy keeps no tensor of that graph, so it deep-copies after a training step.
    actions, values, logp = policy(tensors)
    assert logp.requires_grad and values.requires_grad
    values, logp, entropy = policy.evaluate_actions(tensors, actions.detach())
    (values.sum() + logp.sum() + entropy.sum()).backward()
    with torch.no_grad():
        policy(tensors)  # the next rollout step
    copy.deepcopy(policy)


def test_env__masked_candidates_scores_do_not_change_the_control():
    # What makes the masked distribution right: the projection ignores masked scores.
    env = _env("mixed", load=0.7, diagnostics=True)
    obs, mask = _masked_batch(env)
    rng = np.random.default_rng(1)
    scores = rng.uniform(-1, 1, mask.size)
    controls = []
    for _ in range(2):
        other = scores.copy()
        other[~mask] = rng.uniform(-1, 1, (~mask).sum())
        state = env.unwrapped.sim.state
        control = project(env.unwrapped.workload, state, other)
        controls.append(control.as_dict())
    for key, value in controls[0].items():
        assert np.array_equal(value, controls[1][key]), key


def test_graph_policy__a_batch_mixing_workload_structures_is_refused():
    env = _env("mixed")
    policy = _policy(env)
    obs, _ = env.reset(seed=0)
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    batch["route_index"][1, 0, 0] += 1
    tensors, _ = policy.obs_to_tensor(batch)
    with pytest.raises(ValueError, match="route_index"):
        policy.get_distribution(tensors)


def test_gnn_scheduler__factorized_read_outs_equal_the_mlp_over_concatenated_inputs():
    from torch_geometric.nn import global_max_pool, global_mean_pool

    from mabp_gym.agents.gnn import GNNScheduler, observation_dims, symlog
    from mabp_gym.envs.pyg import to_pyg

    env = _env("mixed", load=0.7)
    torch.manual_seed(0)
    model = GNNScheduler(observation_dims(env.observation_space), hidden=16, readout=8)
    obs, _ = env.reset(seed=0)
    batch = []
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
        batch.append(obs)
    graph = to_pyg({k: np.stack([o[k] for o in batch]) for k in obs})
    scores, pooled = model.forward_graph(graph)
    # The reference: PyG's GINEConv, each read-out's MLP over the concatenated input.
    h = model.node_in(symlog(graph.x))
    e = model.edge_in(symlog(graph.edge_attr))
    for conv, norm in zip(model.convs, model.norms, strict=True):
        h = norm(h + torch.relu(conv(h, graph.edge_index, e)))
    src, dst = graph.edge_index
    t = graph.transfer_edge
    parts = [
        model.service_head(torch.cat([h[graph.service_node], symlog(graph.service_x)], -1)),
        model.route_head(
            torch.cat(
                [
                    h[graph.route_src],
                    h[graph.route_dst],
                    e[graph.route_edge],
                    symlog(graph.route_x),
                ],
                -1,
            )
        ),
        model.transfer_head(torch.cat([h[src[t]], h[dst[t]], e[t], symlog(graph.transfer_x)], -1)),
        model.retain_head(torch.cat([h[graph.retain_node], symlog(graph.retain_x)], -1)),
    ]
    raw = torch.cat([p.reshape(3, -1) for p in parts], dim=1)
    torch.testing.assert_close(scores, torch.nn.functional.softsign(raw), atol=1e-5, rtol=1e-5)
    reference_pool = torch.cat(
        [global_mean_pool(h, graph.batch, 3), global_max_pool(h, graph.batch, 3)], -1
    )
    torch.testing.assert_close(pooled, reference_pool, atol=1e-5, rtol=1e-5)


def test_graph_policy__an_infinite_log_std_init_is_refused_when_made():
    # Accepted before, it failed mid-learn() with the env's "scores must be finite".
    env = _env("mixed")
    for bad in (float("inf"), float("nan"), "x"):
        with pytest.raises(ValueError, match="log_std_init must be a finite number"):
            GraphActorCriticPolicy(
                env.observation_space, env.action_space, lambda _: 3e-4, log_std_init=bad
            )


@pytest.mark.parametrize("cls", [GraphActorCriticPolicy, GNNActorCriticPolicy])
def test_graph_policy__use_sde_is_refused_when_made(cls):
    # Accepted before, it failed inside learn() with SB3's "reset_noise() is only available
    # when using gSDE".
    with pytest.raises(ValueError, match="use_sde=True is not supported"):
        PPO(cls, _env("mixed"), n_steps=32, batch_size=16, use_sde=True)


def test_graph_policy__sampled_scores_are_seeded_draws_around_the_means():
    env = _env("mixed")
    obs, _ = env.reset(seed=3)
    policy = _policy(env)
    mean = _means(policy, obs)[0].numpy()
    active = obs["action_mask"] > 0
    first = policy.sample_scores(obs, torch.Generator().manual_seed(7))
    again = policy.sample_scores(obs, torch.Generator().manual_seed(7))
    other = policy.sample_scores(obs, torch.Generator().manual_seed(8))
    assert first.shape == env.action_space.shape and np.array_equal(first, again)
    assert not np.array_equal(first, other)  # another seed, other draws
    low, high = env.action_space.low, env.action_space.high
    assert np.all(first >= low) and np.all(first <= high)
    # Masked candidates sit at their (clipped) mean; active ones move by std * z.
    np.testing.assert_allclose(first[~active], np.clip(mean[~active], low[0], high[0]), 1e-6)
    std = policy.score_log_std().exp().detach().numpy()
    z = (first - mean) / std
    inside = active & (np.abs(first) < 1.0)  # not clipped
    assert inside.sum() > 10 and 0.5 < np.std(z[inside]) < 1.5
    # A batch of observations gets one row of draws each.
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    rows = policy.sample_scores(batch, torch.Generator().manual_seed(7))
    assert rows.shape == (2, *env.action_space.shape)
    assert np.array_equal(rows[0], first) and not np.array_equal(rows[0], rows[1])
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        policy.sample_scores(obs, 7)  # type: ignore[arg-type]


def test_graph_policy__one_network_alternating_workloads_and_index_dtypes_scores_the_same():
    # The network caches each structure's gather plan: switching workloads, or getting the
    # index arrays back as floats (SB3's rollout buffer stores every array as float32),
    # must score exactly as a network that never saw anything else.
    envs = {workload: _env(workload) for workload in ("mixed", "rag")}
    obs = {workload: env.reset(seed=3)[0] for workload, env in envs.items()}
    shared = _policy(envs["mixed"])
    state = shared.state_dict()
    for workload in ("mixed", "rag", "mixed", "rag"):
        fresh = _policy(envs[workload], seed=1)
        fresh.load_state_dict(state)
        expected = _means(fresh, obs[workload])
        shared_net = _policy(envs[workload], seed=1)
        shared_net.features_extractor = shared.features_extractor  # the one cached network
        as_floats = {k: v.astype(np.float32) for k, v in obs[workload].items()}
        torch.testing.assert_close(_means(shared_net, obs[workload]), expected)
        torch.testing.assert_close(_means(shared_net, as_floats), expected)


@pytest.mark.parametrize("workload", ["mixed", MULTIHOP], ids=["mixed", "multihop14"])
def test_candidate_net__each_score_is_its_owners_linear_function_of_its_own_features(workload):
    # score(c) = softsign(alpha[n(c)] + beta[n(c)] . symlog(x_c)), with [alpha | beta] the
    # node head's (service, retain) or the link head's (route, transfer) row of the
    # candidate's node or link: checked candidate by candidate against the heads' outputs.
    from mabp_gym.agents.candidate_net import KINDS, STRUCTURE
    from mabp_gym.core.encoding import symlog

    env = _env(workload)
    env.action_space.seed(0)
    net = _policy(env).net
    obs, _ = env.reset(seed=0)
    for _ in range(15):
        obs, *_ = env.step(env.action_space.sample())
    later = {k: v if k.endswith("index") else v * 1.5 for k, v in obs.items()}
    batch = {k: torch.as_tensor(np.stack([v, later[k]])) for k, v in obs.items()}
    heads = {}
    net.node_head.register_forward_hook(lambda m, i, out: heads.update(node=out))
    net.link_head[2].register_forward_hook(lambda m, i, out: heads.update(link=out))
    with torch.no_grad():
        scores, _ = net(batch)
    split = net.split
    node, link = heads["node"], heads["link"]  # (rows, B, coefficients)
    tables = {
        "service": node[..., : split["service"]],
        "retain": node[..., split["service"] :],
        "route": link[..., : split["route"]],
        "transfer": link[..., split["route"] :],
    }
    start = 0
    for kind in KINDS:
        owners = obs[STRUCTURE[kind][0]][0]
        for c, owner in enumerate(owners):
            row = tables[kind][int(owner)]  # (B, 1 + f)
            x = symlog(batch[kind][:, c].float())
            expected = torch.nn.functional.softsign(row[:, 0] + (row[:, 1:] * x).sum(-1))
            torch.testing.assert_close(scores[:, start + c], expected, atol=1e-6, rtol=1e-5)
        start += len(owners)
    assert start == scores.shape[1]


def test_graph_policy__adam_is_multi_tensor_and_steps_as_the_per_parameter_loop():
    env = _env("mixed")
    fast = _policy(env)
    assert fast.optimizer.defaults["foreach"] is True
    assert fast.optimizer.defaults["eps"] == 1e-5  # SB3's default kept
    torch.manual_seed(0)
    slow = GraphActorCriticPolicy(
        env.observation_space,
        env.action_space,
        lambda _: 3e-4,
        optimizer_kwargs={"eps": 1e-5, "foreach": False},
    )
    assert slow.optimizer.defaults["foreach"] is False  # a caller's choice wins
    obs, _ = env.reset(seed=0)
    tensors, _ = fast.obs_to_tensor(obs)
    actions = torch.rand(1, env.action_space.shape[0])
    for _ in range(3):
        for policy in (fast, slow):
            value, log_prob, entropy = policy.evaluate_actions(tensors, actions)
            policy.optimizer.zero_grad()
            (value.sum() + log_prob.sum() + entropy.sum()).backward()
            policy.optimizer.step()
    for a, b in zip(fast.parameters(), slow.parameters(), strict=True):
        assert torch.equal(a, b)


def test_update_threads__updates_on_their_threads_and_the_count_given_back_after_learn():
    from stable_baselines3.common.callbacks import BaseCallback

    from mabp_gym.envs.sb3 import UpdateThreads

    torch.set_num_threads(1)
    envs = DummyVecEnv([lambda: _env("mixed") for _ in range(2)])
    model = PPO(
        GraphActorCriticPolicy, envs, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu"
    )
    seen: dict[str, set[int]] = {"update": set(), "rollout": set()}
    evaluate = model.policy.evaluate_actions

    def evaluate_actions(*args, **kwargs):
        seen["update"].add(torch.get_num_threads())
        return evaluate(*args, **kwargs)

    class Rollout(BaseCallback):
        def _on_step(self) -> bool:
            seen["rollout"].add(torch.get_num_threads())
            return True

    model.policy.evaluate_actions = evaluate_actions
    try:
        model.learn(128, callback=[UpdateThreads(2), Rollout()])
        assert seen == {"update": {2}, "rollout": {1}}
        assert torch.get_num_threads() == 1  # given back when learn ends
        model.learn(64, callback=UpdateThreads(2), reset_num_timesteps=False)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)


def test_update_threads__bad_counts_are_refused():
    from mabp_gym.envs.sb3 import UpdateThreads

    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            UpdateThreads(bad)
