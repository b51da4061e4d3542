"""Decentralized control (SPEC 10): one PettingZoo agent per node, with stale telemetry.

``parallel_env(workload=..., staleness=0, **env_kw)`` returns a PettingZoo ``ParallelEnv``
over the same simulator as the single-agent :class:`~mabp_gym.envs.env.SFMSNEnv`. Every node
with candidates is an agent (compute nodes and the gateway). An agent observes its own
queues and memory, the telemetry of its own candidates, its out-neighbours' queue lengths
and memory and its in-neighbours' queue lengths of the commodities they route to it, as
they were ``staleness`` slots ago; it scores only its own candidates.
The per-node scores are written into the global score vector, which goes through the ONE
shared projection (:func:`mabp_gym.project`) and the simulator, exactly as the single-agent
env's action does. What each agent owns and hears from is
:mod:`~mabp_gym.envs.agent_layout`, padded into tables by :mod:`~mabp_gym.envs.agent_tables`;
the delayed telemetry is :mod:`~mabp_gym.envs.telemetry`.

Why the per-node projections are the global projection
-------------------------------------------------------
Service and routing couple only candidates of one node: compute ``mu_i``, the queues
``Q_i^c`` and the capacity of the links leaving ``i`` all belong to ``i``, so the shared
projection restricted to a node's candidates is that node's own projection, whatever the
other nodes score. Retention is per node. Two constraints cross nodes:

- *A transfer into another node's budget* (and "one replica per node"): the shared
  projection admits transfers in one descending order of transfer scores; a destination
  takes an incoming object while its budget, after the moves ranked above it (its own
  outgoing moves free space), allows. As a protocol this is an offer from the source and an
  accept from the destination, in descending score; the view does not simulate those
  messages, the shared projection plays them. Transfer scores are therefore compared
  across agents and must share a scale (MABP's are values per size unit); service, route
  and retain scores are only ever compared within one agent.
- *The replica limit of an object identity* (at most ``replicas`` identities of a signature
  network-wide) binds only when an object is generated, which is the environment's
  dynamics (SPEC 1 step 6), not a decision: no agent needs the network-wide count; it sees
  whether it holds a replica.

With ``staleness=0`` a score rule that reads only these local observations can produce
exactly the centralized scores, and then the same control (``mabp_gym.agents.decentralized``;
``tests/test_parallel_env.py`` checks MABP, BP and Cost-BP slot by slot).

Telemetry
---------
Each node ``j`` publishes every slot its backlog on its admissible pairs and, with memory,
its residency bits of the signatures it can hold and its free budget. Agent ``i`` receives
the messages of the heads of its outgoing links (its out-neighbours); the message carried
for link ``i -> j`` is ``d_ij`` slots old (``staleness``: one delay for every link, or one
per link). Before slot ``d_ij`` an agent sees the state at the episode start.

Upstream: the tail ``j`` of every route ``j -> i`` of commodity ``c`` sends ``i`` its queue
length ``Q_j^c``, over that link, so ``d_ji`` slots old (MABP's demand evidence counts the
units queued one hop upstream). Over a link ``i -> h`` that carries transfers, ``h`` also
relays to ``i`` the upstream queue lengths it received (as old as both links), so that
``i`` can value ``h``'s memory as ``h`` does. ``info`` reports per agent the numbers
received and sent per slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from mabp_gym.core.control import Control
from mabp_gym.core.encoding import (
    NODE_FEATURES,
    RETAIN_FEATURES,
    ROUTE_FEATURES,
    SERVICE_FEATURES,
    TRANSFER_FEATURES,
    ObservationEncoder,
)
from mabp_gym.core.simulator import Simulator, SlotOutcome
from mabp_gym.core.validate import checked_action
from mabp_gym.core.workload import Workload
from mabp_gym.envs.agent_layout import NEIGHBOUR_STATIC_FEATURES, AgentLayout, agent_layouts
from mabp_gym.envs.agent_tables import AgentTables, gather_rows
from mabp_gym.envs.env import SFMSNEnv
from mabp_gym.envs.telemetry import MAX_STALENESS, TelemetryBuffer, link_delays

__all__ = [
    "AGENT_REWARDS",
    "MAX_STALENESS",
    "NEIGHBOUR_STATIC_FEATURES",
    "AgentLayout",
    "SFMSNParallelEnv",
    "parallel_env",
]

AGENT_REWARDS = ("own", "global")


def parallel_env(
    workload: str | Workload = "mixed", staleness: Any = 0, **env_kw: Any
) -> SFMSNParallelEnv:
    """The decentralized PettingZoo view of a workload (SPEC 10).

    Args:
        workload: a workload name, a workload file path or a :class:`Workload`.
        staleness: telemetry delay in slots: an integer for every link, a sequence of one
            integer per link (link order of ``workload.links``), or a mapping
            ``{(src name, dst name): delay}`` (links not named get 0).
        **env_kw: ``agent_reward`` (``"own"`` or ``"global"``) and every argument of
            :class:`~mabp_gym.envs.env.SFMSNEnv` (``nu``, ``memory``, ``reward``,
            ``reward_scale``, ``load``, ``horizon``, ...).
    """
    return SFMSNParallelEnv(workload, staleness=staleness, **env_kw)


class SFMSNParallelEnv(ParallelEnv):
    """A stateful foundation-model service network with one agent per node.

    ## Agents
    Every node with at least one candidate, named by the node (``possible_agents`` in node
    order). Agents never terminate; all truncate together after ``horizon`` slots.

    ## Action Space
    Per agent ``Box(-1, 1, (D_l,), float32)`` with
    ``D_l = A_max + R_max + T_max + K_max``, laid out
    ``[service | route | transfer | retain]``, each block padded to the largest agent's
    (``local_slices``; padding is ignored). As in the single-agent env any finite array is
    accepted and only order and sign matter; transfer scores are also compared across
    agents (module docstring).

    ## Observation Space
    Per agent a ``Dict`` of fixed-shape ``Box`` arrays, the same shapes for every agent
    (so one policy can serve several agents). ``C`` commodities, ``S`` signatures,
    ``Nb`` the largest out-degree:

    - ``node`` ``(13,)``: the node's row of the single-agent node table; ``queues`` ``(C,)``
      (units in service included); ``queue_age`` ``(C,)``: slots the oldest waiting unit
      has waited; ``memory`` ``(S,)`` residency;
    - ``service`` ``(A_max, 5)``, ``route`` ``(R_max, 4)``, ``transfer`` ``(T_max, 3)``,
      ``retain`` ``(K_max, 3)``: the single-agent telemetry rows of its own candidates,
      where what a row says about a neighbour (queue differential, compatible memory at
      the head, free budget at the head) comes from the neighbour's stale telemetry;
      ``service_index`` ``(2, A_max)``: commodity, signature; ``route_index``
      ``(2, R_max)``: neighbour slot, commodity; ``transfer_index`` ``(2, T_max)``:
      neighbour slot, signature; ``retain_index`` ``(K_max,)``: signature (``-1`` pads);
    - ``neighbour_queues`` ``(Nb, C)``, ``neighbour_memory`` ``(Nb, S)``: the telemetry;
      ``neighbour_age`` ``(Nb,)``: its age in slots; ``neighbour_static`` ``(Nb, 12)``:
      role one-hot, ``mu``, budget and the link's capacity, cost, bandwidth;
      ``neighbour_mask`` ``(Nb,)``;
    - ``upstream_queues`` ``(U,)``: for each route into the node (ascending route order;
      ``U`` the most routes into any node), the queue length of its commodity at its tail,
      as old as its link; ``upstream_age`` ``(U,)``; ``upstream_index`` ``(2, U)``: the
      route's commodity and the number of routes out of its source pair (``-1`` pads);
      ``neighbour_upstream`` ``(Nb, U)``: each out-neighbour's ``upstream_queues`` as it
      relays them over a link that carries transfers (zeros over other links);
    - ``candidate_mask`` ``(D_l,)`` int8: own candidates that can act now (as far as the
      stale telemetry tells). It is not called ``action_mask`` because PettingZoo's API
      test passes an ``action_mask`` to ``Box.sample``, which rejects masks.

    ## Rewards
    ``agent_reward="own"`` (default): the agent's share of the single-agent reward, its own
    backlog and the penalty of its own decisions (service it completed, units it routed,
    objects it moved, holds and writes), ``-(Q_i(t+1) + nu h_i(t)) / reward_scale`` (the
    drift form with ``reward="drift_plus_penalty"``); the shares sum to the single-agent
    reward. ``agent_reward="global"``: every agent gets the single-agent reward.

    ## Info
    Per agent: ``backlog``, ``penalty`` (its shares), ``telemetry_received`` and
    ``telemetry_sent`` (numbers per slot). The slot's global record is on the env:
    ``last_scores`` (the assembled ``(D,)`` vector), ``last_control``, ``last_outcome``.

    ## Version History
    - v0: initial version.
    """

    metadata = {
        "name": "mabp_gym_parallel_v0",
        "render_modes": ["ansi", "rgb_array"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        workload: str | Workload = "mixed",
        *,
        staleness: Any = 0,
        agent_reward: str = "own",
        **env_kw: Any,
    ) -> None:
        if agent_reward not in AGENT_REWARDS:
            raise ValueError(f"agent_reward must be one of {AGENT_REWARDS}, got {agent_reward!r}")
        # The single-agent env validates every setting and owns the simulator, so both
        # views seed, step and reward one episode identically.
        if env_kw.get("obs_mode", "dict") != "dict":
            raise ValueError(
                "parallel_env: obs_mode must be 'dict' (every agent observes a Dict of its "
                f"own arrays; obs_mode='flat' is the single env's), got {env_kw['obs_mode']!r}"
            )
        if callable(env_kw.get("reward")):
            raise ValueError(
                "parallel_env: reward must be 'backlog' or 'drift_plus_penalty' (each agent's "
                "share of it is defined per node); a reward function of your own is the "
                "single env's"
            )
        if env_kw.get("diagnostics"):  # accepted, and no agent's info showed any of it
            raise ValueError(
                "parallel_env: diagnostics=True is the single env's (per-slot hits, churn, "
                "penalty parts in its info); each agent's info holds backlog, penalty and "
                "telemetry, and the single env over the same workload and seed steps the "
                "same episode"
            )
        self._single = SFMSNEnv(workload, **env_kw)
        self.nu = self._single.nu
        self.memory = self._single.memory
        self.reward_kind = self._single.reward_kind
        self.reward_scale = self._single.reward_scale
        self.horizon = self._single.horizon
        self.render_mode = self._single.render_mode
        self.agent_reward = agent_reward
        self._encoder = ObservationEncoder(self.workload, memory=self.memory)
        self.link_delays = link_delays(self.workload, staleness)
        self.layouts = agent_layouts(self.workload, self.link_delays, self.memory)
        self.possible_agents = [layout.name for layout in self.layouts]
        self.agents: list[str] = []
        self._by_name = {layout.name: layout for layout in self.layouts}
        self._tables = AgentTables(self.workload, self.layouts, self.link_delays, self.memory)
        self._build_spaces()
        self.last_scores: np.ndarray | None = None
        self.last_control: Control | None = None
        self.last_outcome: SlotOutcome | None = None

    @property
    def workload(self) -> Workload:
        """The single env's workload: with a ``load`` interval, the episode's load."""
        return self._single.workload

    @property
    def sim(self) -> Simulator:
        """The single env's simulator (a new one each episode with a ``load`` interval)."""
        return self._single.sim

    # -- static layout --------------------------------------------------------------------
    def layout(self, agent: str) -> AgentLayout:
        """The static layout of ``agent``."""
        if agent not in self._by_name:
            raise ValueError(f"unknown agent {agent!r}; agents: {self.possible_agents}")
        return self._by_name[agent]

    @property
    def local_slices(self) -> tuple[slice, slice, slice, slice]:
        """Slices of an agent's action: ``(service, route, transfer, retain)``."""
        a, r, t, k = self._tables.sizes
        return (
            slice(0, a),
            slice(a, a + r),
            slice(a + r, a + r + t),
            slice(a + r + t, a + r + t + k),
        )

    def _build_spaces(self) -> None:
        """Every agent's observation and action space (one object each) and the state's."""
        ix = self.workload.index
        lays = self.layouts
        n, c, s = ix.num_nodes, ix.num_commodities, ix.num_signatures
        inf = np.inf
        self._obs_spaces = {x.name: self._observation_space() for x in lays}
        self._act_spaces = {
            x.name: spaces.Box(-1.0, 1.0, (self._tables.d_local,), dtype=np.float32) for x in lays
        }
        self.state_space = spaces.Box(0.0, inf, (n * c + n * s,), dtype=np.float32)

    def _observation_space(self) -> spaces.Dict:
        ix, tb = self.workload.index, self._tables
        a, r, t, k = tb.sizes
        nb, c, s = tb.nb_max, ix.num_commodities, ix.num_signatures
        u = tb.u_max
        inf = np.inf

        def box(shape: tuple[int, ...], low: float = 0.0, high: float = inf) -> spaces.Box:
            return spaces.Box(low, high, shape, dtype=np.float32)

        def index(shape: tuple[int, ...], high: int) -> spaces.Box:
            return spaces.Box(-1, max(high, 1) - 1, shape, dtype=np.int64)

        return spaces.Dict(
            {
                "node": box((len(NODE_FEATURES),)),
                "queues": box((c,)),
                "queue_age": box((c,)),
                "memory": box((s,), high=1.0),
                "service": box((a, len(SERVICE_FEATURES)), low=-inf),
                "service_index": index((2, a), max(c, s)),
                "route": box((r, len(ROUTE_FEATURES)), low=-inf),
                "route_index": index((2, r), max(nb, c)),
                "transfer": box((t, len(TRANSFER_FEATURES)), low=-inf),
                "transfer_index": index((2, t), max(nb, s)),
                "retain": box((k, len(RETAIN_FEATURES)), low=-inf),
                "retain_index": index((k,), s),
                "neighbour_queues": box((nb, c)),
                "neighbour_memory": box((nb, s), high=1.0),
                "neighbour_age": box((nb,)),
                "neighbour_static": box((nb, len(NEIGHBOUR_STATIC_FEATURES)), low=-inf),
                "neighbour_mask": spaces.Box(0, 1, (nb,), dtype=np.int8),
                "upstream_queues": box((u,)),
                "upstream_age": box((u,)),
                "upstream_index": index((2, u), max(c, tb.fanout_max + 1)),
                "neighbour_upstream": box((nb, u)),
                "candidate_mask": spaces.Box(0, 1, (tb.d_local,), dtype=np.int8),
            }
        )

    # Both return the same space object every call (PettingZoo requires it: seeding).
    def observation_space(self, agent: str) -> spaces.Dict:
        self.layout(agent)
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Box:
        self.layout(agent)
        return self._act_spaces[agent]

    # -- episode --------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, Any]]]:
        """Start an episode; ``seed`` seeds the simulator as the single-agent env does.

        ``options`` are accepted and ignored (PettingZoo's API test passes some).
        """
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"options must be a dict or None, got {type(options).__name__}")
        global_obs, _ = self._single.reset(seed=seed)
        self.agents = list(self.possible_agents)
        self._telemetry = TelemetryBuffer(self._tables)
        self.last_scores = self.last_control = self.last_outcome = None
        assert isinstance(global_obs, dict)  # the wrapped env runs in obs_mode='dict'
        obs = self._observe(global_obs)
        zero = dict.fromkeys(self.agents, 0.0)
        return obs, self._infos(zero, zero)

    def step(
        self, actions: dict[str, np.ndarray]
    ) -> tuple[
        dict[str, dict[str, np.ndarray]],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        if not self.agents:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        scores = self.assemble(actions)
        if self.reward_kind == "drift_plus_penalty":
            before = self.sim.state.backlog_pairs(self.workload).astype(np.float64)
        control, outcome = self.sim.step_scores(scores)
        self.last_scores, self.last_control, self.last_outcome = scores, control, outcome
        global_obs = self._encoder.encode(self.sim.state)
        after = self.sim.state.backlog_pairs(self.workload).astype(np.float64)
        penalty = self._node_penalty(control, outcome)
        cost = self.nu * penalty
        backlog = self._per_agent(after)
        if self.reward_kind == "backlog":
            share = -(backlog + cost) / self.reward_scale
            total = -(outcome.backlog + self.nu * outcome.penalty) / self.reward_scale
        else:
            drift = self._per_agent(0.5 * after * after) - self._per_agent(0.5 * before * before)
            share = -(drift + cost) / self.reward_scale
            # The same sum, in the same order, as the single-agent env's reward.
            total = (
                -(
                    0.5 * float(after @ after)
                    - 0.5 * float(before @ before)
                    + self.nu * outcome.penalty
                )
                / self.reward_scale
            )
        if self.agent_reward == "own":
            rewards = {name: float(share[q]) for q, name in enumerate(self.possible_agents)}
        else:
            rewards = dict.fromkeys(self.possible_agents, float(total))
        obs = self._observe(global_obs)
        truncated = self.sim.state.t >= self.horizon
        infos = self._infos(
            dict(zip(self.possible_agents, backlog.tolist(), strict=True)),
            dict(zip(self.possible_agents, penalty.tolist(), strict=True)),
        )
        terminations = dict.fromkeys(self.possible_agents, False)
        truncations = dict.fromkeys(self.possible_agents, bool(truncated))
        if truncated:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def assemble(self, actions: dict[str, np.ndarray]) -> np.ndarray:
        """The global ``(D,)`` score vector of the agents' local actions."""
        tb = self._tables
        if not isinstance(actions, Mapping):
            raise ValueError(
                f"actions must be a dict from agent name to an array of shape "
                f"({tb.d_local},), got {type(actions).__name__}"
            )
        missing = [a for a in self.agents if a not in actions]
        unknown = [a for a in actions if a not in self._by_name]
        if missing or unknown:
            raise ValueError(
                f"actions must name every live agent exactly: missing {missing}, "
                f"unknown {unknown}; agents: {self.agents}"
            )
        stacked = np.empty((len(self.possible_agents), tb.d_local), dtype=np.float64)
        for q, name in enumerate(self.possible_agents):
            what = f"action of agent {name!r}"
            action = np.asarray(checked_action(actions[name], what), dtype=np.float64)
            if action.shape != (tb.d_local,):
                raise ValueError(
                    f"action of agent {name!r} must have shape ({tb.d_local},), got {action.shape}"
                )
            stacked[q] = action
        if not np.isfinite(stacked).all():
            bad = [self.possible_agents[q] for q in np.flatnonzero(~np.isfinite(stacked).all(1))]
            raise ValueError(f"actions must be finite floats; NaN or inf from agents {bad}")
        scores = np.empty(self.workload.index.num_scores)
        scores[tb.global_pos] = stacked.ravel()[tb.local_pos]
        return scores

    def global_observation(self) -> dict[str, np.ndarray]:
        """The single-agent observation of the current state (what a centralized policy
        sees), for comparisons and centralized critics."""
        return self._encoder.encode(self.sim.state)

    def state(self) -> np.ndarray:
        """Global state for centralized critics: all queues ``(N*C)`` then all memory
        residency ``(N*S)``, current (never stale)."""
        obs = self.global_observation()
        return np.concatenate([obs["queues"].ravel(), obs["memory"].ravel()])

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            from mabp_gym.core.render import render_ansi

            return render_ansi(self.workload, self.sim.state, self.last_outcome)
        if self.render_mode == "rgb_array":
            from mabp_gym.core.render import render_rgb

            return render_rgb(self.workload, self.sim.state)
        return None

    def close(self) -> None:
        """Nothing to release."""

    # -- observations ---------------------------------------------------------------------
    def _observe(self, global_obs: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Every agent's observation of the slot: its own rows of ``global_obs`` and what
        it has received of its neighbours (published now, read as old as its links)."""
        state = self.sim.state
        t = state.t
        tb = self._tables
        queues = global_obs["queues"]  # (N, C), units in service included
        memory = global_obs["memory"]  # (N, S)
        self._telemetry.publish(t, queues, memory, tb.budget - state.memory_used)
        heard = self._telemetry.read(t)
        own_queues = queues[tb.agent_node]  # (n_ag, C)
        own_memory = memory[tb.agent_node]  # (n_ag, S)

        service = gather_rows(global_obs["service"], tb.svc)
        retain = gather_rows(global_obs["retain"], tb.retain)
        route = tb.route_features(own_queues, heard.neighbour_queues, heard.neighbour_memory)
        transfer, movable = tb.transfer_features(
            own_memory, heard.neighbour_memory, heard.neighbour_free
        )
        local_mask = tb.local_mask(global_obs["action_mask"], movable)

        nodes = global_obs["node_features"][tb.agent_node]
        ages = self._queue_ages(state, t)[tb.agent_node]
        obs = {}
        for q, name in enumerate(self.possible_agents):
            obs[name] = {
                "node": nodes[q],
                "queues": own_queues[q],
                "queue_age": ages[q],
                "memory": own_memory[q],
                "service": service[q],
                "service_index": tb.service_index[q].copy(),
                "route": route[q],
                "route_index": tb.route_index[q].copy(),
                "transfer": transfer[q],
                "transfer_index": tb.transfer_index[q].copy(),
                "retain": retain[q],
                "retain_index": tb.retain_index[q].copy(),
                "neighbour_queues": heard.neighbour_queues[q],
                "neighbour_memory": heard.neighbour_memory[q],
                "neighbour_age": heard.neighbour_age[q],
                "neighbour_static": tb.nb_static[q].copy(),
                "neighbour_mask": tb.nb_valid[q].astype(np.int8),
                "upstream_queues": heard.upstream_queues[q],
                "upstream_age": heard.upstream_age[q],
                "upstream_index": tb.upstream_index[q].copy(),
                "neighbour_upstream": heard.neighbour_upstream[q],
                "candidate_mask": local_mask[q],
            }
        return obs

    def _queue_ages(self, state, t: int) -> np.ndarray:
        ix = self.workload.index
        ages = np.zeros((ix.num_nodes, ix.num_commodities), dtype=np.float32)
        pairs, births = state.fifo.heads()
        ages[ix.pair_node[pairs], ix.pair_commodity[pairs]] = t - births
        return ages

    # -- per-node shares of the reward ---------------------------------------------------
    def _per_agent(self, per_pair: np.ndarray) -> np.ndarray:
        """Sum of a per-pair quantity over each agent's node, ``(n_agents,)``."""
        ix = self.workload.index
        per_node = np.bincount(ix.pair_node, weights=per_pair, minlength=ix.num_nodes)
        return per_node[self._tables.agent_node]

    def _node_penalty(self, control: Control, outcome: SlotOutcome) -> np.ndarray:
        """``h_i(t)``: the penalty of each node's own decisions; sums to ``h(t)``.

        Compute penalties go to the node that completed the unit, transmission to the
        link's tail, migration to the object's source, holding and write costs to the node
        that holds the object after retention.
        """
        wl, ix = self.workload, self.workload.index
        n = ix.num_nodes
        per_node = np.zeros(n)
        if outcome.units:
            acts = np.fromiter((u[0] for u in outcome.units), dtype=np.int64)
            pens = np.fromiter((u[4] for u in outcome.units), dtype=np.float64)
            per_node += np.bincount(ix.action_node[acts], weights=pens, minlength=n)
        if control.route.any():
            per_node += np.bincount(
                ix.link_src[ix.route_link],
                weights=control.route * ix.link_cost[ix.route_link],
                minlength=n,
            )
        if control.transfers.size:
            k = control.transfers
            per_node += np.bincount(
                ix.link_src[ix.transfer_link[k]],
                weights=wl.migration_cost * ix.signature_size[ix.transfer_signature[k]],
                minlength=n,
            )
        state = self.sim.state
        per_node += wl.theta * state.memory_used
        for i, s in outcome.generated:
            if state.holder[i, s] >= 0:
                per_node[i] += wl.omega
        return per_node[self._tables.agent_node]

    def _infos(
        self, backlog: dict[str, float], penalty: dict[str, float]
    ) -> dict[str, dict[str, Any]]:
        return {
            x.name: {
                "backlog": backlog[x.name],
                "penalty": penalty[x.name],
                "telemetry_received": x.telemetry_received,
                "telemetry_sent": x.telemetry_sent,
            }
            for x in self.layouts
        }
