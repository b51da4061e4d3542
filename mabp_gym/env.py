"""Gymnasium adapter over the simulator core: graph observations, projected score actions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mabp_gym import slotcore
from mabp_gym.simulator import Simulator, SlotOutcome
from mabp_gym.workload import ROLES, Workload
from mabp_gym.workloads import check_number, is_workload_file, make_workload, workload_params

REWARDS = ("backlog", "drift_plus_penalty")
OBS_MODES = ("dict", "flat")
FLAT_KEYS = ("node_features", "queues", "memory", "service", "route", "transfer", "retain",
             "action_mask")
"""The arrays of the ``obs_mode="flat"`` vector, in order: the observation less its static
parts (``edge_index``, ``edge_features`` and every ``*_index`` array)."""
NODE_FEATURES = (*(f"role_{r}" for r in ROLES), "mu", "budget", "memory_used", "backlog",
                 "in_service", "residual_work")
EDGE_FEATURES = ("capacity", "cost", "bandwidth")
SERVICE_FEATURES = ("work", "penalty", "hit", "successor_pressure", "queue")
ROUTE_FEATURES = ("differential", "cost", "dst_compatible_memory", "queue")
TRANSFER_FEATURES = ("src_holds", "size", "dst_free_budget")
RETAIN_FEATURES = ("held", "size", "demand")


def _reject_unknown_keywords(workload: Any, overrides: dict[str, Any]) -> None:
    """A keyword that is neither an env argument nor a parameter of the workload is a
    ``TypeError``, as Python raises for any unknown argument (wrappers such as TorchRL's
    ``GymEnv`` try ``frameskip=`` and fall back on exactly that)."""
    if isinstance(workload, Workload):
        allowed = {"load"}
    elif isinstance(workload, str) and (workload == "file" or is_workload_file(workload)):
        allowed = {"load", "horizon", "path"}
    elif isinstance(workload, str):
        try:
            allowed = set(workload_params(workload))
        except ValueError:
            return  # an unknown workload name: make_workload explains it
    else:
        return
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise TypeError(f"SFMSNEnv.__init__() got an unexpected keyword argument "
                        f"{unknown[0]!r} (neither an env argument nor a parameter of "
                        f"workload {getattr(workload, 'name', workload)!r}; its parameters: "
                        f"{sorted(allowed)})")


def _load_interval(value: Any) -> tuple[float, float] | None:
    """``load=(low, high)``: the interval a load is drawn from at each reset (None for a
    plain number, which the workload builder validates)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, np.ndarray)):
        return None
    if len(value) != 2:
        raise ValueError(f"load: must be a number or an interval (low, high), got {value!r}")
    low = check_number(value[0], "load (low end of the interval)", low=0.0)
    high = check_number(value[1], "load (high end of the interval)", low=0.0)
    if low > high:
        raise ValueError(f"load: the interval (low, high) must have low <= high, got {value!r}")
    return low, high


def symlog(x: np.ndarray) -> np.ndarray:
    """``sign(x) log(1 + |x|)``: queue counts span orders of magnitude."""
    return np.sign(x) * np.log1p(np.abs(x))


def _checked_action(action: Any) -> Any:
    """Refuse scores that numpy would silently reinterpret: a masked array (the mask
    would be dropped), complex numbers (the imaginary part would be dropped), strings,
    booleans or objects. Shape and finiteness are checked by the projection."""
    if isinstance(action, np.ma.MaskedArray):
        raise ValueError("the action is a masked array; pass a plain array of scores (fill "
                         "the masked entries, e.g. with -1 for 'do not act')")
    kind = np.asarray(action).dtype.kind
    if kind not in "fiu":
        raise ValueError(f"the action must be real-valued scores (float or int), got dtype "
                         f"{np.asarray(action).dtype}")
    return action


def _box(shape: tuple[int, ...], low: float = 0.0, high: float = np.inf,
         dtype: type = np.float32) -> spaces.Box:
    return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


class SFMSNEnv(gym.Env):
    """A stateful foundation-model service network (SFMSN) as a Gymnasium environment.

    ## Description
    Workers of an agentic LLM-serving network hold queues of requests and reusable
    execution memory under budgets (SPEC sections 1 and 2). Each step is one slot: the
    agent scores every candidate decision, the shared projection turns the scores into a
    feasible control, and the simulator executes it.

    ## Action Space
    ``Box(-1, 1, (D,), float32)``: one score per candidate, laid out
    ``[service (A) | route (R) | transfer (T) | retain (K)]``
    (``env.unwrapped.workload.index.score_slices``). Any finite array of shape ``(D,)`` is
    accepted: only order and sign matter (SPEC 3.2). Candidates with score > 0 act in
    descending score; negative retain scores drop objects. An all-negative vector is the
    legal idle action. NaN, inf or a wrong shape raise ``ValueError``.

    ## Observation Space
    A ``Dict`` of fixed-shape arrays (``N`` nodes, ``E`` links, ``C`` commodities, ``S``
    signatures); every ``*_index`` array is static and lets a model scatter candidates onto
    the graph:

    - ``node_features`` ``(N, 13)``: role one-hot, ``mu``, budget, memory used, backlog,
      unit in service, its residual work; ``edge_index`` ``(2, E)`` int64;
      ``edge_features`` ``(E, 3)``: capacity, cost ``d``, transfer bandwidth;
    - ``queues`` ``(N, C)`` (units in service included), ``memory`` ``(N, S)`` residency;
    - ``service`` ``(A, 5)``: current work, penalty, hit bit, successor pressure
      ``sum_c' P(c'|a, Y) Q_i^c'``, input queue; ``service_index`` ``(2, A)``: node,
      commodity;
    - ``route`` ``(R, 4)``: differential ``Q_i^c - Q_j^c``, cost, whether the destination
      holds memory compatible with the commodity, source queue; ``route_index`` ``(2, R)``:
      link, commodity;
    - ``transfer`` ``(T, 3)``: source holds, size, destination free budget;
      ``transfer_index`` ``(2, T)``: link, signature;
    - ``retain`` ``(K, 3)``: held, size, queued demand of compatible commodities at the
      node; ``retain_index`` ``(2, K)``: node, signature;
    - ``action_mask`` ``(D,)`` int8: candidates that can act now.

    ## Rewards
    ``reward="backlog"`` (default): ``-(||Q(t+1)||_1 + nu h(t)) / reward_scale``;
    ``reward="drift_plus_penalty"``: ``-(L(Q(t+1)) - L(Q(t)) + nu h(t)) / reward_scale``
    with ``L(Q) = sum Q^2 / 2``. ``h(t)`` is the slot's penalty (SPEC 1 step 9).

    ## Episode End
    Never terminates; truncates after ``horizon`` slots (the registered ids set
    ``max_episode_steps`` to the default horizon, 600; when you pass another ``horizon``
    pass the same ``max_episode_steps``).

    ## Arguments
    ``workload`` (a name of :data:`mabp_gym.WORKLOADS` or a :class:`Workload`), ``nu``
    (penalty weight, 5), ``memory`` (``False``: the no-memory system), ``reward``,
    ``reward_scale`` (100), ``check_invariants`` (assert SPEC 6 every slot), ``render_mode``
    (``"ansi"`` or ``"rgb_array"``) and every workload parameter (``load``, ``beta``,
    ``K``, ``eps``, ``horizon``, ...; see :func:`mabp_gym.workload_params`).

    ``load`` may also be an interval ``(low, high)``: each reset draws the episode's load
    uniformly from it with the env's seeded generator (``reset(seed=s)`` fixes it), and
    the reset ``info`` reports it as ``info["load"]``. Training over a range of loads
    keeps a policy from learning one operating point only.

    ``obs_mode="flat"`` (default ``"dict"``) gives one ``Box((F,), float32)`` vector for
    libraries whose default encoders take a single array (RLlib): the arrays of
    :data:`FLAT_KEYS` raveled in that order, every entry but the 0/1 ``action_mask``
    symlog-scaled (``sign(x) log(1 + |x|)``); the static arrays (``edge_index``,
    ``edge_features``, every ``*_index``) are left out. ``env.unwrapped.flat_layout``
    maps each key to its ``(slice, shape)`` in the vector.

    Vector envs: ``gymnasium.make_vec`` (sync or async) declares
    ``metadata["autoreset_mode"]`` (``NEXT_STEP`` by default; ``SAME_STEP`` via
    ``vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}``).

    ``info`` holds the slot's counts (``arrivals``, ``served``, ``hits``, ``completed``,
    ``delays``, ``insertions``, ``evictions``, ``penalty`` and its ``penalty_compute`` /
    ``penalty_transmission`` / ``penalty_memory`` split, ``backlog``), the executed
    ``control`` (a dict of the :class:`~mabp_gym.Control` arrays, with ``transfers`` as a
    ``(T,)`` indicator of the executed transfer candidates) and the ``action_mask``.

    ## Version History
    - v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, workload: str | Workload = "mixed", *, nu: float = 5.0,
                 memory: bool = True, reward: str = "backlog", reward_scale: float = 100.0,
                 check_invariants: bool = False, render_mode: str | None = None,
                 obs_mode: str = "dict", **workload_overrides: Any) -> None:
        _reject_unknown_keywords(workload, workload_overrides)
        if not isinstance(obs_mode, str) or obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        # load=(low, high): build at the low end, draw each episode's load at reset.
        self.load_interval = _load_interval(workload_overrides.get("load"))
        if self.load_interval is not None:
            # The builder validates the high end too (its range), then builds at the low end.
            if isinstance(workload, str):
                try:
                    make_workload(workload, **{**workload_overrides,
                                               "load": self.load_interval[1]})
                except ValueError as error:
                    raise ValueError(f"load interval {self.load_interval}, high end: "
                                     f"{error}") from None
            workload_overrides["load"] = self.load_interval[0]
        if isinstance(workload, Workload):
            load = workload_overrides.pop("load", None)
            self.workload = workload if load is None else workload.with_load(load)
        elif isinstance(workload, str):
            self.workload = make_workload(workload, **workload_overrides)
        else:
            raise ValueError(f"workload must be a workload name or a Workload, got {workload!r}")
        if not isinstance(reward, str) or reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        check_number(nu, "nu", low=0.0)
        check_number(reward_scale, "reward_scale", low=0.0, low_open=True)
        for name, flag in (("memory", memory), ("check_invariants", check_invariants)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or "
                             f"None, got {render_mode!r}")
        self.nu = float(nu)
        self.memory = bool(memory)
        self.reward_kind = reward
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.horizon = self.workload.horizon
        self.sim = Simulator(self.workload, memory=self.memory, check_invariants=check_invariants)
        self._encoder = ObservationEncoder(self.workload, memory=self.memory)
        ix = self.workload.index
        self.action_space = spaces.Box(-1.0, 1.0, (ix.num_scores,), dtype=np.float32)
        self.obs_mode = obs_mode
        self._base_workload = self.workload
        if obs_mode == "flat":
            self.flat_layout: dict[str, tuple[slice, tuple[int, ...]]] = {}
            start = 0
            for key in FLAT_KEYS:
                shape = self._encoder.space[key].shape
                size = int(np.prod(shape))
                self.flat_layout[key] = (slice(start, start + size), shape)
                start += size
            self.observation_space = spaces.Box(-np.inf, np.inf, (start,), dtype=np.float32)
        else:
            self.observation_space = self._encoder.space
        self._last: SlotOutcome | None = None

    # ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"options are not supported, got {sorted(options)}")
        info: dict[str, Any] = {}
        if self.load_interval is not None:
            # Drawn first, from the env's generator: reset(seed) fixes the load too. Only
            # the arrival rate depends on the load, so the encoder and spaces stay.
            load = float(self.np_random.uniform(*self.load_interval))
            self.workload = self._base_workload.with_load(load)
            self.sim = Simulator(self.workload, memory=self.memory,
                                 check_invariants=self.sim.check_invariants)
            info["load"] = load
        # The simulator owns its own generator, seeded from the env's so that reset(seed)
        # fixes the episode and reset() continues a reproducible stream.
        sim_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        self.sim.reset(sim_seed)
        self._last = None
        obs = self._encoder.encode(self.sim.state)
        info["action_mask"] = obs["action_mask"].astype(bool)
        return self._observe(obs), info

    def _observe(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | np.ndarray:
        """The observation in the env's ``obs_mode``."""
        if self.obs_mode == "dict":
            return obs
        flat = np.concatenate([obs[key].ravel() for key in FLAT_KEYS]).astype(np.float32)
        # Symlog every array but the 0/1 mask, so that default MLP encoders see O(1) inputs.
        mask = self.flat_layout["action_mask"][0]
        flat[:mask.start] = symlog(flat[:mask.start])
        return flat

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool,
                                                 dict[str, Any]]:
        # The projection validates the scores (shape, finiteness) before anything changes.
        scores = _checked_action(action)
        state = self.sim.state
        if self.reward_kind == "drift_plus_penalty":
            before = _lyapunov(state, self.workload)
        control, outcome = self.sim.step_scores(scores)
        self._last = outcome
        cost = self.nu * outcome.penalty
        if self.reward_kind == "backlog":
            reward = -(outcome.backlog + cost) / self.reward_scale
        else:
            reward = -(_lyapunov(self.sim.state, self.workload) - before + cost) \
                / self.reward_scale
        obs = self._encoder.encode(self.sim.state)
        truncated = self.sim.state.t >= self.horizon
        info = {
            "arrivals": outcome.arrivals, "served": outcome.served, "hits": outcome.hits,
            "completed": outcome.completed, "delays": outcome.delays,
            "insertions": outcome.insertions, "evictions": outcome.evictions,
            "routed": outcome.routed, "transfers": outcome.transfers, "work": outcome.work,
            "penalty": outcome.penalty, "penalty_compute": outcome.penalty_compute,
            "penalty_transmission": outcome.penalty_transmission,
            "penalty_memory": outcome.penalty_memory, "backlog": outcome.backlog,
            "control": self._control_info(control),
            "action_mask": obs["action_mask"].astype(bool),
        }
        return self._observe(obs), float(reward), False, bool(truncated), info

    def _control_info(self, control) -> dict[str, np.ndarray]:
        # Fixed shapes, so that vector envs can stack infos: executed transfers become a
        # (T,) indicator over the transfer candidates.
        executed = np.zeros(self.workload.index.num_transfers, dtype=bool)
        executed[control.transfers] = True
        return {**control.as_dict(), "transfers": executed}

    # ----------------------------------------------------------------------------------
    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            from mabp_gym.render import render_ansi

            return render_ansi(self.workload, self.sim.state, self._last)
        if self.render_mode == "rgb_array":
            from mabp_gym.render import render_rgb

            return render_rgb(self.workload, self.sim.state)
        return None


def _lyapunov(state, workload: Workload) -> float:
    backlog = state.backlog_pairs(workload).astype(np.float64)
    return 0.5 * float(backlog @ backlog)


class ObservationEncoder:
    """Encodes a :class:`~mabp_gym.state.SimState` into the env's Dict observation."""

    def __init__(self, workload: Workload, *, memory: bool = True) -> None:
        self.workload = workload
        self.memory = memory
        ix = workload.index
        n, e, c, s = ix.num_nodes, ix.num_links, ix.num_commodities, ix.num_signatures
        a, r, t, k = ix.num_actions, ix.num_routes, ix.num_transfers, ix.num_retains
        roles = np.zeros((n, len(ROLES)), dtype=np.float32)
        roles[np.arange(n), [ROLES.index(node.role) for node in workload.nodes]] = 1.0
        budget = ix.budget if memory else np.zeros(n)
        self._static_nodes = np.concatenate(
            [roles, ix.mu[:, None], budget[:, None]], axis=1).astype(np.float32)
        self._edge_index = np.stack([ix.link_src, ix.link_dst]).astype(np.int64)
        self._edge_features = np.stack(
            [ix.link_capacity, ix.link_cost, ix.link_bandwidth], axis=1).astype(np.float32)
        self._service_index = np.stack([ix.action_node, ix.action_commodity]).astype(np.int64)
        self._route_index = np.stack([ix.route_link, ix.route_commodity]).astype(np.int64)
        self._transfer_index = np.stack([ix.transfer_link, ix.transfer_signature]).astype(
            np.int64)
        self._retain_index = np.stack([ix.retain_node, ix.retain_signature]).astype(np.int64)
        self._arange_a = np.arange(a)
        # Successor laws are sparse (a few outcomes per action): keep, per action, the flat
        # positions of its successor queues in an (N * C + 1) vector (the extra last entry
        # reads 0) and their probabilities per hit bit, so that the successor pressure is a
        # gather instead of an (A, C) product.
        width = max(1, int((ix.successor_law[:, :, :c] > 0).any(axis=0).sum(axis=1).max(
            initial=0)))
        positions = np.full((a, width), n * c, dtype=np.int64)
        probs = np.zeros((2, a, width), dtype=np.float32)
        for act in range(a):
            outcomes = np.flatnonzero((ix.successor_law[:, act, :c] > 0).any(axis=0))
            positions[act, :outcomes.size] = ix.action_node[act] * c + outcomes
            probs[:, act, :outcomes.size] = ix.successor_law[:, act, outcomes]
        self._successor_positions = positions
        self._successor_probs = probs
        self._route_dst_node = ix.link_dst[ix.route_link]
        self._route_cost = ix.link_cost[ix.route_link].astype(np.float32)
        self._transfer_src = ix.link_src[ix.transfer_link]
        self._transfer_dst = ix.link_dst[ix.transfer_link]
        self._transfer_bandwidth = ix.link_bandwidth[ix.transfer_link]
        # Demand served by a retained signature: queued units of the commodities it makes a
        # hit at its node, (K, C).
        compat = np.zeros((n, s, c), dtype=bool)
        assisted = ix.action_signature >= 0
        compat[ix.action_node[assisted], ix.action_signature[assisted],
               ix.action_commodity[assisted]] = True
        retain_commodities = compat[ix.retain_node, ix.retain_signature]  # (K, C)
        width = max(1, int(retain_commodities.sum(axis=1).max(initial=0)))
        self._retain_positions = np.full((k, width), n * c, dtype=np.int64)
        for cand in range(k):
            served = np.flatnonzero(retain_commodities[cand])
            self._retain_positions[cand, :served.size] = ix.retain_node[cand] * c + served
        # Scratch vectors with one extra entry that always reads "nothing" (-1 / 0), so that
        # padded positions can be gathered without masks.
        self._holder_flat = np.full(n * s + 1, -1, dtype=np.int64)
        self._queue_flat = np.zeros(n * c + 1, dtype=np.float32)
        sizes = ix.signature_size
        self._transfer_size = sizes[ix.transfer_signature].astype(np.float32)
        self._retain_size = sizes[ix.retain_signature].astype(np.float32)
        self._penalty = ix.penalty.astype(np.float32)
        if slotcore.AVAILABLE:
            self._compiled_statics(workload)
        inf = np.inf
        self.space = spaces.Dict({
            "node_features": _box((n, len(NODE_FEATURES))),
            "edge_index": spaces.Box(0, max(n - 1, 0), (2, e), dtype=np.int64),
            "edge_features": _box((e, len(EDGE_FEATURES)), low=-inf),
            "queues": _box((n, c)),
            "memory": _box((n, s), high=1.0),
            "service": _box((a, len(SERVICE_FEATURES)), low=-inf),
            "service_index": spaces.Box(0, max(n, c, 1) - 1, (2, a), dtype=np.int64),
            "route": _box((r, len(ROUTE_FEATURES)), low=-inf),
            "route_index": spaces.Box(0, max(e, c, 1) - 1, (2, r), dtype=np.int64),
            "transfer": _box((t, len(TRANSFER_FEATURES)), low=-inf),
            "transfer_index": spaces.Box(0, max(e, s, 1) - 1, (2, t), dtype=np.int64),
            "retain": _box((k, len(RETAIN_FEATURES)), low=-inf),
            "retain_index": spaces.Box(0, max(n, s, 1) - 1, (2, k), dtype=np.int64),
            "action_mask": spaces.Box(0, 1, (ix.num_scores,), dtype=np.int8),
        })

    def _compiled_statics(self, workload: Workload) -> None:
        """Static arrays of the compiled encoder (:mod:`mabp_gym.slotcore`)."""
        ix = workload.index
        # Route r's destination holds memory compatible with its commodity when one of the
        # actions of that (node, commodity) is a hit: those actions, per route (CSR).
        by_pair: dict[tuple[int, int], list[int]] = {}
        for a, (i, c) in enumerate(zip(ix.action_node.tolist(), ix.action_commodity.tolist(),
                                       strict=True)):
            by_pair.setdefault((i, c), []).append(a)
        members = [by_pair.get(key, []) for key in zip(self._route_dst_node.tolist(),
                                                       ix.route_commodity.tolist(),
                                                       strict=True)]
        self._compat_ptr = np.concatenate(
            [[0], np.cumsum([len(m) for m in members])]).astype(np.int64)
        self._compat_action = np.asarray([a for m in members for a in m], dtype=np.int64)
        self._transfer_dst_node = np.ascontiguousarray(self._transfer_dst)
        self._transfer_bandwidth64 = np.ascontiguousarray(self._transfer_bandwidth,
                                                          dtype=np.float64)
        self._retain_slot = (ix.retain_node * ix.num_signatures
                             + ix.retain_signature).astype(np.int64)
        self._work = np.ascontiguousarray(ix.work)

    def encode(self, state) -> dict[str, np.ndarray]:
        """The observation of ``state`` (fresh arrays every call)."""
        if slotcore.AVAILABLE:
            return self._encode_compiled(state)
        return self.encode_reference(state)

    def _encode_compiled(self, state) -> dict[str, np.ndarray]:
        ix = self.workload.index
        n, c = ix.num_nodes, ix.num_commodities
        hit = np.empty(ix.num_actions, dtype=np.int64)
        nodes = np.empty((n, len(NODE_FEATURES)), dtype=np.float32)
        queues = np.zeros((n, c), dtype=np.float32)
        memory = np.empty((n, ix.num_signatures), dtype=np.float32)
        service = np.empty((ix.num_actions, len(SERVICE_FEATURES)), dtype=np.float32)
        route = np.empty((ix.num_routes, len(ROUTE_FEATURES)), dtype=np.float32)
        transfer = np.empty((ix.num_transfers, len(TRANSFER_FEATURES)), dtype=np.float32)
        retain = np.empty((ix.num_retains, len(RETAIN_FEATURES)), dtype=np.float32)
        mask = np.empty(ix.num_scores, dtype=np.int8)
        slotcore.encode_compiled(
            state.queue_len, state.service_action, state.service_residual,
            state.holder.ravel(), state.memory_used, self.memory, ix.pair_node,
            ix.pair_commodity, ix.action_pair, ix.action_node, ix.hit_slot, self._work,
            self._penalty, ix.route_src_pair, ix.route_dst_pair, self._route_cost,
            self._compat_ptr, self._compat_action, ix.transfer_src_slot,
            ix.transfer_dst_slot, self._transfer_dst_node, self._transfer_size,
            self._transfer_bandwidth64, ix.budget, self._retain_slot, self._retain_size,
            self._retain_positions, ix.mu, self._static_nodes, self._queue_flat, hit, nodes,
            queues, memory, service, route, transfer, retain, mask)
        # The successor pressure is a float32 sum whose order numpy fixes: numpy's.
        service[:, 3] = (self._successor_probs[hit, self._arange_a]
                         * self._queue_flat[self._successor_positions]).sum(axis=1)
        return self._observation(nodes, queues, memory, service, route, transfer, retain,
                                 mask)

    def _observation(self, nodes: np.ndarray, queues: np.ndarray, memory: np.ndarray,
                     service: np.ndarray, route: np.ndarray, transfer: np.ndarray,
                     retain: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        """The observation dict: this slot's arrays and fresh copies of the static ones."""
        return {
            "node_features": nodes,
            "edge_index": self._edge_index.copy(),
            "edge_features": self._edge_features.copy(),
            "queues": queues,
            "memory": memory,
            "service": service,
            "service_index": self._service_index.copy(),
            "route": route,
            "route_index": self._route_index.copy(),
            "transfer": transfer,
            "transfer_index": self._transfer_index.copy(),
            "retain": retain,
            "retain_index": self._retain_index.copy(),
            "action_mask": mask,
        }

    def encode_reference(self, state) -> dict[str, np.ndarray]:
        """:meth:`encode` in numpy: the readable reference of the compiled encoder."""
        ix = self.workload.index
        n_act, n_route = ix.num_actions, ix.num_routes
        pairs = state.backlog_pairs(self.workload)  # units in service included
        busy = state.service_action >= 0
        queues = np.zeros((ix.num_nodes, ix.num_commodities), dtype=np.float32)
        queues[ix.pair_node, ix.pair_commodity] = pairs
        resident = state.holder >= 0  # (N, S)
        if self.memory and ix.num_signatures:
            self._holder_flat[:-1] = state.holder.ravel()
            hit = self._holder_flat[ix.hit_slot] >= 0
        else:
            hit = np.zeros(n_act, dtype=bool)
        hit_int = hit.astype(np.int64)

        service = np.empty((n_act, len(SERVICE_FEATURES)), dtype=np.float32)
        service[:, 0] = ix.work[hit_int, self._arange_a]
        service[:, 1] = self._penalty[hit_int, self._arange_a]
        service[:, 2] = hit
        flat = self._queue_flat
        flat[:-1] = queues.ravel()
        service[:, 3] = (self._successor_probs[hit_int, self._arange_a]
                         * flat[self._successor_positions]).sum(axis=1)
        service[:, 4] = pairs[ix.action_pair]  # the input queue

        route = np.empty((n_route, len(ROUTE_FEATURES)), dtype=np.float32)
        src_q = pairs[ix.route_src_pair]
        route[:, 0] = src_q - pairs[ix.route_dst_pair]
        route[:, 1] = self._route_cost
        # Does the destination hold a signature that makes this commodity a hit there?
        compatible = np.zeros((ix.num_nodes, ix.num_commodities), dtype=bool)
        compatible[ix.action_node[hit], ix.action_commodity[hit]] = True
        route[:, 2] = compatible[self._route_dst_node, ix.route_commodity]
        route[:, 3] = src_q

        free = ix.budget - state.memory_used
        transfer = np.empty((ix.num_transfers, len(TRANSFER_FEATURES)), dtype=np.float32)
        src_holds = resident[self._transfer_src, ix.transfer_signature]
        transfer[:, 0] = src_holds
        transfer[:, 1] = self._transfer_size
        transfer[:, 2] = free[self._transfer_dst]
        retain = np.empty((ix.num_retains, len(RETAIN_FEATURES)), dtype=np.float32)
        retain[:, 0] = resident[ix.retain_node, ix.retain_signature]
        retain[:, 1] = self._retain_size
        retain[:, 2] = flat[self._retain_positions].sum(axis=1)

        # Masks: a service candidate can act when its queue has waiting units and its node
        # is not fully taken by a unit in service; a route when its source queue has waiting
        # units; a transfer when it could move now; every retain candidate is live (it also
        # ranks objects generated this slot).
        residual = np.where(busy, state.service_residual, 0.0)
        mask = np.ones(ix.num_scores, dtype=np.int8)
        waiting = state.queue_len
        node_free = (ix.mu - np.minimum(ix.mu, residual)) > 1e-9
        mask[:n_act] = (waiting[ix.action_pair] > 0) & node_free[ix.action_node]
        mask[n_act:n_act + n_route] = waiting[ix.route_src_pair] > 0
        if ix.num_transfers:
            dst = self._transfer_dst
            mask[n_act + n_route:n_act + n_route + ix.num_transfers] = (
                src_holds & ~resident[dst, ix.transfer_signature]
                & (self._transfer_size <= self._transfer_bandwidth)
                & (self._transfer_size <= free[dst] + 1e-9))

        nodes = np.empty((ix.num_nodes, len(NODE_FEATURES)), dtype=np.float32)
        nodes[:, :-4] = self._static_nodes
        nodes[:, -4] = state.memory_used
        nodes[:, -3] = queues.sum(axis=1)
        nodes[:, -2] = busy
        nodes[:, -1] = residual
        return self._observation(nodes, queues, resident.astype(np.float32), service, route,
                                 transfer, retain, mask)
