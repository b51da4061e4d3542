"""MABP and BP as one agent per node, each scoring from its local observation only.

These are the rules of :mod:`mabp_gym.agents.mabp` and :mod:`mabp_gym.agents.backpressure`
rewritten for the decentralized view (:func:`mabp_gym.parallel_env`, SPEC 10). A local rule
reads only its agent's observation: its own queues, its own memory and its service rows (hit
bits), and its out-neighbours' telemetry (queue lengths and memory residency, possibly
stale) and the upstream telemetry (its in-neighbours' queue lengths of the commodities they
route to it, and those its transfer heads relay). What it takes from the workload is static:
its own primitives and its neighbours' (the "known primitives" every MABP variant assumes)
and the layout of its candidates and of the routes into it.

What each score needs:

- service (both rules): the node's own queues, hit bits and primitives;
- routes (both rules): the own queue and the head's queue of that commodity; Cost-BP
  also holds a route of a commodity the node serves when its own best service weight for
  it is negative (the sibling hold of :class:`mabp_gym.agents.backpressure.Backpressure`: own
  queues only);
- retention (MABP): the node's marginal value of each object, a function of its own
  queues, hit bits and a per-action demand evidence it keeps: its own queued units plus
  those queued one hop upstream on each route into the pair, each shared by ``1 /`` the
  fanout of its source pair (``upstream_queues``), averaged with a memory of ``evidence``
  slots;
- transfers (MABP): the value gained at the head minus the value lost here. The head's
  value is a function of the head's queues, its hit bits, its upstream queue lengths
  (``neighbour_upstream``, relayed by the head) and its demand evidence, so the agent
  keeps a *shadow* of the head's evidence, updated every slot from the head's telemetry;
  with fresh telemetry (``staleness=0``) the shadow equals the head's own evidence and the
  score equals the centralized one. BP never transfers.

With ``staleness=0``, the scores assembled from every agent equal the centralized
policy's score vector entry for entry, so the shared projection returns the same control
(``tests/test_parallel_env.py`` checks this slot by slot over whole episodes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.core.workload import Workload

LOCAL_POLICIES = ("mabp", "bp", "cost-bp")
"""Score rules with a local version (:func:`make_local_policy`)."""


class _NodesRule:
    """MABP's per-node quantities for a few nodes at once: the agent's own node first, then
    the neighbours it shadows (one stacked computation keeps the numpy calls few).

    Every expression mirrors :class:`mabp_gym.agents.mabp.MABP` restricted to these nodes' actions,
    in the same order of floating-point operations, so that results are bit-identical.
    """

    def __init__(
        self,
        workload: Workload,
        nodes: list[int],
        *,
        nu: float,
        horizon: int,
        transition: bool,
        reuse: bool,
        evidence: float,
        upstream_width: int,
    ) -> None:
        ix = workload.index
        per_node = [np.flatnonzero(ix.action_node == node) for node in nodes]
        acts = np.concatenate(per_node).astype(np.int64)
        self.num_own_actions = per_node[0].size
        self.node_slot = np.repeat(np.arange(len(nodes)), [a.size for a in per_node])
        self.commodities = ix.action_commodity[acts]
        self.signatures = ix.action_signature[acts]
        self.horizon = horizon
        self.evidence = evidence
        keep = 1.0 - 1.0 / evidence
        self.effective_horizon = float(sum(keep**tau for tau in range(horizon)))
        self.transition = transition
        self.law = ix.successor_law[:, acts, :-1]  # (2, A, C)
        penalty = (ix.penalty if reuse else ix.loss)[:, acts]  # (2, A)
        self.work = ix.work[:, acts]
        mu = ix.mu[ix.action_node[acts]]
        self.arange = np.arange(acts.size)
        self.num_nodes = len(nodes)
        # Retain candidates node by node; offsets[k] is where node k's start.
        retains = [np.flatnonzero(ix.retain_node == node) for node in nodes]
        self.retain_offsets = np.cumsum([0, *(r.size for r in retains)])
        members = np.zeros((int(self.retain_offsets[-1]), acts.size))
        for q, a in enumerate(acts):
            slot, sig = int(self.node_slot[q]), ix.action_signature[a]
            if sig >= 0 and ix.retain_of[nodes[slot], sig] >= 0:
                row = np.searchsorted(retains[slot], ix.retain_of[nodes[slot], sig])
                members[self.retain_offsets[slot] + row, q] = 1.0
        self.retains = retains
        self.members = members
        self.assisted = self.signatures >= 0
        self.demand = np.zeros(acts.size)
        # Constants of the per-slot arithmetic, computed once (the same floats MABP
        # recomputes every slot).
        self.nu_penalty = nu * penalty
        w_miss, w_hit = np.maximum(self.work, 1e-9)
        self.cap_hit = mu / w_hit
        self.cap_miss = mu / w_miss
        self.saved_penalty = nu * (penalty[0] - penalty[1])
        self.saved_work = w_miss - w_hit
        self.shadow_signature = np.where(self.assisted, self.signatures, -1)[self.num_own_actions :]
        # Compatible units about to arrive (MABP's inflow term): for each action, the
        # routes into its pair in ascending route order (MABP's summation order), read from
        # the upstream telemetry [own (U) | each shadowed node's, relayed (U each)], each
        # shared by 1 / fanout of its source pair.
        fanout = np.bincount(ix.route_src_pair, minlength=ix.num_pairs).astype(np.float64)
        route_dst = ix.link_dst[ix.route_link]
        inflow_action, inflow_entry, inflow_pair = [], [], []
        for q, a in enumerate(acts):
            slot = int(self.node_slot[q])
            into = np.flatnonzero(route_dst == nodes[slot])
            for u, r in enumerate(into):
                if ix.route_commodity[r] == ix.action_commodity[a]:
                    inflow_action.append(q)
                    inflow_entry.append(slot * upstream_width + u)
                    inflow_pair.append(int(ix.route_src_pair[r]))
        self.inflow_action = np.asarray(inflow_action, dtype=np.int64)
        self.inflow_entry = np.asarray(inflow_entry, dtype=np.int64)
        self.inflow_share = 1.0 / np.maximum(fanout[np.asarray(inflow_pair, dtype=np.int64)], 1.0)

    def reset(self) -> None:
        self.demand[:] = 0.0

    def weights(self, queues: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W under miss and hit (2, A), own backlog (A,))`` from the nodes' queues
        ``(num_nodes, C)``."""
        own = queues[self.node_slot, self.commodities]
        weight = own - self.nu_penalty
        if self.transition:
            weight = weight - np.einsum("hac,ac->ha", self.law, queues[self.node_slot])
        return weight, own

    def shadow_hits(self, memory: np.ndarray) -> np.ndarray:
        """Hit bits of the shadowed nodes' actions from their residency ``(num_nodes - 1,
        S)``."""
        padded = np.concatenate([memory, np.zeros((memory.shape[0], 1))], axis=1)
        held = padded[self.node_slot[self.num_own_actions :] - 1, self.shadow_signature]
        return (held > 0).astype(np.int64)

    def values(
        self, weight: np.ndarray, ratio: np.ndarray, own: np.ndarray, upstream: np.ndarray
    ) -> np.ndarray:
        """Marginal value of every retain candidate of the nodes, ``(K,)``; advances the
        demand evidence one slot (as MABP's ``_object_values``). ``upstream`` is the flat
        upstream telemetry ``[own (U) | each shadowed node's (U)]``."""
        positive = np.maximum(weight, 0.0)
        frozen = np.maximum(
            np.minimum(own, self.cap_hit) * positive[1]
            - np.minimum(own, self.cap_miss) * positive[0],
            0.0,
        )
        price = np.ones(self.num_nodes)
        np.maximum.at(price, self.node_slot, ratio)
        saved = self.saved_penalty + self.saved_work * price[self.node_slot]
        coming = own + np.bincount(
            self.inflow_action, self.inflow_share * upstream[self.inflow_entry], minlength=own.size
        )
        servable = np.minimum(coming, self.cap_hit)
        rate = 1.0 / self.evidence
        self.demand = (1 - rate) * self.demand + rate * servable
        future = self.effective_horizon * self.demand * np.maximum(saved, 0.0)
        per_action = np.where(self.assisted, frozen + future, 0.0)
        return self.members @ per_action


class LocalPolicy:
    """Base class: a score rule for one agent of :class:`mabp_gym.envs.parallel.SFMSNParallelEnv`.

    Args:
        env: the parallel env (read for static structure only: the workload, the agent's
            layout and the local action layout).
        agent: the agent's name.
        nu: penalty weight (default: the env's).
    """

    name = "local"

    def __init__(self, env: Any, agent: str, *, nu: float | None = None) -> None:
        self.workload: Workload = env.workload
        self.layout = env.layout(agent)
        self.agent = agent
        self.nu = float(env.nu if nu is None else nu)
        if not np.isfinite(self.nu) or self.nu < 0:
            raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
        self.memory = env.memory
        self.slices = env.local_slices
        self.size = self.slices[3].stop
        ix = self.workload.index
        lay = self.layout
        self.route_commodity = ix.route_commodity[lay.routes]
        self.route_slot = lay.route_neighbour
        self.route_cost = ix.link_cost[ix.route_link[lay.routes]]
        space = env.observation_space(agent)
        self._shapes = {key: tuple(sub.shape) for key, sub in space.spaces.items()}
        # Every agent's view has the same shapes (padded): its candidates' index tables
        # tell one agent's from another's.
        base = getattr(env, "unwrapped", env)  # PettingZoo's wrappers hide private names
        q, tables = base.possible_agents.index(agent), base._tables
        self._own = {
            key: getattr(tables, key)[q]
            for key in ("service_index", "route_index", "transfer_index", "retain_index")
        }
        self.t = 0

    def reset(self, seed: int | None = None) -> None:
        """Forget per-episode state."""
        self.t = 0

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The agent's action ``(D_l,)`` float64 for its local observation."""
        if self.t % 256 == 0:  # a mix-up repeats: checked now and then, not every slot
            self._check_view(obs)
        out = np.full(self.size, -1.0)
        self._fill(obs, out)
        self.t += 1
        return out

    def _check_view(self, obs: Any) -> None:
        """Refuse another agent's or workload's view (the rule read it without a word)."""
        if not isinstance(obs, dict):
            raise ValueError(
                f"the local rule of {self.agent!r} reads its agent's Dict observation "
                f"(obs[{self.agent!r}] of the parallel env), got {type(obs).__name__}"
            )
        for key, shape in self._shapes.items():
            if key in obs and np.shape(obs[key]) != shape:  # an IndexError came first
                raise ValueError(
                    f"the local rule of {self.agent!r} got an observation whose {key} is "
                    f"{np.shape(obs[key])}, not its agent's {shape}: another agent's (or "
                    f"another workload's) view; pass obs[{self.agent!r}]"
                )
        for key, own in self._own.items():
            if key in obs and not np.array_equal(obs[key], own):
                raise ValueError(
                    f"the local rule of {self.agent!r} got another agent's view (its {key} "
                    f"is not {self.agent!r}'s); pass obs[{self.agent!r}]"
                )

    __call__ = scores

    def _fill(self, obs: dict[str, np.ndarray], out: np.ndarray) -> None:
        raise NotImplementedError

    def _routes(self, queues: np.ndarray, neighbours: np.ndarray, cost: bool) -> np.ndarray:
        """``Q_i^c - Q_j^c`` (minus ``nu d`` with ``cost``) per own route."""
        route = queues[self.route_commodity] - neighbours[self.route_slot, self.route_commodity]
        return route - self.nu * self.route_cost if cost else route


class LocalMABP(LocalPolicy):
    """:class:`mabp_gym.agents.mabp.MABP` for one agent (marginal-value retention and transfers).

    Args:
        horizon, evidence, transition, reuse: as for :class:`mabp_gym.agents.mabp.MABP`.
    """

    name = "mabp"

    def __init__(
        self,
        env: Any,
        agent: str,
        *,
        horizon: int = 20,
        evidence: float = 4.0,
        transition: bool = True,
        reuse: bool = True,
        nu: float | None = None,
    ) -> None:
        super().__init__(env, agent, nu=nu)
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}")
        if not np.isfinite(evidence) or evidence < 1:
            raise ValueError(f"evidence must be a number of slots >= 1, got {evidence!r}")
        wl, ix, lay = self.workload, self.workload.index, self.layout
        # The heads of the agent's transfer links are shadowed: their memory values are
        # computed here from their telemetry (neighbour slots in ``shadow_slots``).
        self.shadow_slots = np.unique(lay.transfer_neighbour)
        nodes = [lay.node, *(int(lay.neighbours[k]) for k in self.shadow_slots)]
        width = env.observation_space(agent)["upstream_queues"].shape[0]
        self.rule = _NodesRule(
            wl,
            nodes,
            nu=self.nu,
            horizon=int(horizon),
            transition=transition,
            reuse=reuse,
            evidence=float(evidence),
            upstream_width=width,
        )
        self.holding = self.nu * wl.theta * int(horizon)
        self.migration = self.nu * wl.migration_cost
        self.retain_size = ix.signature_size[ix.retain_signature[lay.retains]]
        rule = self.rule
        sig = ix.transfer_signature[lay.transfers]
        self.transfer_src = np.searchsorted(lay.retains, ix.retain_of[lay.node, sig])
        slot_of = {int(k): q + 1 for q, k in enumerate(self.shadow_slots)}
        self.transfer_dst = np.asarray(
            [
                rule.retain_offsets[slot_of[int(k)]]
                + np.searchsorted(rule.retains[slot_of[int(k)]], ix.retain_of[lay.neighbours[k], s])
                for k, s in zip(lay.transfer_neighbour, sig, strict=True)
            ],
            dtype=np.int64,
        )
        self.transfer_size = ix.signature_size[sig]

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.rule.reset()

    def _fill(self, obs: dict[str, np.ndarray], out: np.ndarray) -> None:
        rule = self.rule
        a_i = rule.num_own_actions
        queues = np.asarray(obs["queues"], dtype=np.float64)
        neighbours = np.asarray(obs["neighbour_queues"], dtype=np.float64)
        service, route, transfer, retain = self.slices
        out[route.start : route.start + self.route_commodity.size] = self._routes(
            queues, neighbours, cost=True
        )
        if rule.num_nodes > 1:
            stacked = np.concatenate([queues[None, :], neighbours[self.shadow_slots]])
        else:
            stacked = queues[None, :]
        weight, own = rule.weights(stacked)
        hit = np.zeros(own.size, dtype=np.int64)
        if self.memory:
            hit[:a_i] = np.asarray(obs["service"])[:a_i, 2]
            if rule.num_nodes > 1:
                hit[a_i:] = rule.shadow_hits(
                    np.asarray(obs["neighbour_memory"], dtype=np.float64)[self.shadow_slots]
                )
        current = weight[hit, rule.arange]
        ratio = current / np.maximum(rule.work[hit, rule.arange], 1e-9)
        out[service.start : service.start + a_i] = np.where(own[:a_i] > 0, ratio[:a_i], -1.0)
        k_i = self.retain_size.size
        if not k_i:
            return
        upstream = np.asarray(obs["upstream_queues"], dtype=np.float64)
        if rule.num_nodes > 1:
            upstream = np.concatenate(
                [
                    upstream,
                    np.asarray(obs["neighbour_upstream"], dtype=np.float64)[
                        self.shadow_slots
                    ].ravel(),
                ]
            )
        value = rule.values(weight, ratio, own, upstream)
        out[retain.start : retain.start + k_i] = value[:k_i] / self.retain_size - self.holding
        if self.transfer_size.size:
            gained = value[self.transfer_dst] - value[self.transfer_src]
            out[transfer.start : transfer.start + gained.size] = (
                gained / self.transfer_size - self.migration
            )


class LocalBP(LocalPolicy):
    """:class:`mabp_gym.agents.backpressure.Backpressure` (``bp`` or ``cost-bp``) for one agent:
    memory-averaged primitives, most-recently-used retention, no transfers."""

    name = "bp"

    def __init__(
        self, env: Any, agent: str, *, cost: bool = False, nu: float | None = None
    ) -> None:
        super().__init__(env, agent, nu=nu)
        ix, lay = self.workload.index, self.layout
        acts = lay.actions
        self.cost = cost
        self.commodities = ix.action_commodity[acts]
        assisted = ix.action_signature[acts] >= 0
        weight = np.where(assisted & self.memory, 0.5, 0.0)
        mix = weight[:, None]
        self.law = (mix * ix.successor_law[1, acts] + (1 - mix) * ix.successor_law[0, acts])[:, :-1]
        self.work = weight * ix.work[1, acts] + (1 - weight) * ix.work[0, acts]
        self.penalty = weight * ix.penalty[1, acts] + (1 - weight) * ix.penalty[0, acts]
        # Recency retention over the node's own queues (mabp_gym.agents.base.RecencyRetention).
        compat = np.zeros((lay.retains.size, ix.num_commodities), dtype=bool)
        for a in acts:
            s = ix.action_signature[a]
            if s >= 0 and ix.retain_of[lay.node, s] >= 0:
                compat[
                    np.searchsorted(lay.retains, ix.retain_of[lay.node, s]), ix.action_commodity[a]
                ] = True
        self.compat = compat
        self.last_used = np.full(lay.retains.size, -1e9)
        # Cost-BP's sibling hold: routes of a commodity the node itself serves; the best
        # service weight per commodity is a max over the node's actions of it.
        self.sibling = ix.serves[lay.node, self.route_commodity]
        self.commodity_count = ix.num_commodities

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.last_used[:] = -1e9

    def _fill(self, obs: dict[str, np.ndarray], out: np.ndarray) -> None:
        queues = np.asarray(obs["queues"], dtype=np.float64)
        a_i = self.commodities.size
        own = queues[self.commodities]
        rows = np.broadcast_to(queues, (a_i, queues.size)).copy()
        weight = own - np.einsum("ac,ac->a", self.law, rows)
        if self.cost:
            weight = weight - self.nu * self.penalty
        service, route, _, retain = self.slices
        out[service.start : service.start + a_i] = np.where(
            own > 0, weight / np.maximum(self.work, 1e-9), -1.0
        )
        neighbours = np.asarray(obs["neighbour_queues"], dtype=np.float64)
        routes = self._routes(queues, neighbours, cost=self.cost)
        if self.cost:
            # A unit this node defers for cost gains nothing from a sibling server that
            # defers it for the same cost (Backpressure's sibling hold, read locally).
            best = np.full(self.commodity_count, -np.inf)
            np.maximum.at(best, self.commodities, weight)
            held = self.sibling & (best[self.route_commodity] < 0)
            routes = np.where(held, -1.0, routes)
        out[route.start : route.start + self.route_commodity.size] = routes
        k_i = self.last_used.size
        if k_i:
            wanted = (self.compat * queues).sum(axis=1) > 0
            self.last_used[wanted] = self.t
            out[retain.start : retain.start + k_i] = 1.0 / (
                1.0 + np.minimum(self.t - self.last_used, 1e6)
            )


def make_local_policy(name: str, env: Any, agent: str, **kw: Any) -> LocalPolicy:
    """A local score rule ``name`` (``mabp``, ``bp`` or ``cost-bp``) for ``agent``."""
    if name == "mabp":
        return LocalMABP(env, agent, **kw)
    if name in ("bp", "cost-bp"):
        policy = LocalBP(env, agent, cost=name == "cost-bp", **kw)
        policy.name = name
        return policy
    raise ValueError(f"unknown local policy {name!r}; choose one of {LOCAL_POLICIES}")


def local_policies(name: str, env: Any, **kw: Any) -> dict[str, LocalPolicy]:
    """One local rule ``name`` per agent of ``env`` (:func:`mabp_gym.parallel_env`)."""
    if not hasattr(env, "possible_agents"):
        raise ValueError(
            "local_policies takes the decentralized view, mabp_gym.parallel_env(...) (one "
            f"agent a node), got {type(env).__name__}; a Gymnasium env takes make_policy"
        )
    return {agent: make_local_policy(name, env, agent, **kw) for agent in env.possible_agents}
