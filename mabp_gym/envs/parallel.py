"""Decentralized control (SPEC 10): one PettingZoo agent per node, with stale telemetry.

``parallel_env(workload=..., staleness=0, **env_kw)`` returns a PettingZoo ``ParallelEnv``
over the same simulator as the single-agent :class:`~mabp_gym.envs.env.SFMSNEnv`. Every node
with candidates is an agent (compute nodes and the gateway). An agent observes its own
queues and memory, the telemetry of its own candidates, its out-neighbours' queue lengths
and memory and its in-neighbours' queue lengths of the commodities they route to it, as
they were ``staleness`` slots ago; it scores only its own candidates.
The per-node scores are written into the global score vector, which goes through the ONE
shared projection (:func:`mabp_gym.project`) and the simulator, exactly as the single-agent
env's action does.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
from mabp_gym.core.workload import ROLES, Workload
from mabp_gym.envs.env import SFMSNEnv

AGENT_REWARDS = ("own", "global")
MAX_STALENESS = 10_000
"""The longest telemetry delay in slots: the buffer holds that many slots of every node's
published state (about 7.5 kB a slot on ``mixed``, so 75 MB at the limit; 2e5 slots asked
for 1.5 GB and then failed)."""
NEIGHBOUR_STATIC_FEATURES = (
    *(f"role_{r}" for r in ROLES),
    "mu",
    "budget",
    "link_capacity",
    "link_cost",
    "link_bandwidth",
)


@dataclass(frozen=True, eq=False)
class AgentLayout:
    """What one agent owns and whom it hears from (static; global indices).

    The agent's action is ``[service (A) | route (R) | transfer (T) | retain (K)]`` with
    every block padded to the largest agent's (``SFMSNParallelEnv.local_slices``); row
    ``k`` of a block scores the ``k``-th candidate listed here.
    """

    name: str
    node: int
    actions: np.ndarray  # (A_i,) int64, service candidates (global action ids)
    routes: np.ndarray  # (R_i,) int64, route candidates on links leaving the node
    transfers: np.ndarray  # (T_i,) int64, transfer candidates on links leaving the node
    retains: np.ndarray  # (K_i,) int64, retain candidates of the node
    neighbours: np.ndarray  # (Nb_i,) int64, heads of the node's links, in link order
    neighbour_links: np.ndarray  # (Nb_i,) int64, the link to each neighbour
    neighbour_delays: np.ndarray  # (Nb_i,) int64, age of each neighbour's telemetry
    route_neighbour: np.ndarray  # (R_i,) int64, neighbour slot of each route's head
    transfer_neighbour: np.ndarray  # (T_i,) int64, neighbour slot of each transfer's head
    upstream_routes: np.ndarray  # (U_i,) int64, route candidates INTO the node (ascending)
    upstream_delays: np.ndarray  # (U_i,) int64, age of each upstream queue length
    relayed: np.ndarray  # (Nb_i,) bool, the neighbour relays its upstream queue lengths
    telemetry_received: int  # numbers received per slot
    telemetry_sent: int  # numbers this node's message costs per slot, summed over readers


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
        self._single = SFMSNEnv(workload, **env_kw)
        self.nu = self._single.nu
        self.memory = self._single.memory
        self.reward_kind = self._single.reward_kind
        self.reward_scale = self._single.reward_scale
        self.horizon = self._single.horizon
        self.render_mode = self._single.render_mode
        self.agent_reward = agent_reward
        self._encoder = ObservationEncoder(self.workload, memory=self.memory)
        self.link_delays = _link_delays(self.workload, staleness)
        self.layouts = _layouts(self.workload, self.link_delays, self.memory)
        self.possible_agents = [layout.name for layout in self.layouts]
        self.agents: list[str] = []
        self._by_name = {layout.name: layout for layout in self.layouts}
        self._build_tables()
        # Relayed upstream queue lengths travel two links, so they can be twice as old.
        self._history = 2 * max(int(self.link_delays.max(initial=0)), 0) + 1
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
        a, r, t, k = self._sizes
        return (
            slice(0, a),
            slice(a, a + r),
            slice(a + r, a + r + t),
            slice(a + r + t, a + r + t + k),
        )

    def _build_tables(self) -> None:
        """Padded per-agent gathers, so that an observation is a few array operations."""
        ix = self.workload.index
        lays = self.layouts
        a_max = max(len(x.actions) for x in lays)
        r_max = max(len(x.routes) for x in lays)
        t_max = max(len(x.transfers) for x in lays)
        k_max = max(len(x.retains) for x in lays)
        nb_max = max(len(x.neighbours) for x in lays)
        self._sizes = (a_max, r_max, t_max, k_max)
        self._nb_max = nb_max
        n, c, s = ix.num_nodes, ix.num_commodities, ix.num_signatures
        up_index = self._build_upstream()
        self._build_candidates()
        self._build_static_parts(up_index)
        self._build_score_map()
        inf = np.inf
        self._obs_spaces = {x.name: self._observation_space() for x in lays}
        self._act_spaces = {
            x.name: spaces.Box(-1.0, 1.0, (self._d_local,), dtype=np.float32) for x in lays
        }
        self.state_space = spaces.Box(0.0, inf, (n * c + n * s,), dtype=np.float32)

    def _pad(self, rows: list[Any], width: int, fill: int) -> np.ndarray:
        """``rows`` (one per agent) as a table of ``width`` columns, padded with ``fill``."""
        table = np.full((len(self.layouts), width), fill, dtype=np.int64)
        for q, row in enumerate(rows):
            table[q, : len(row)] = row
        return table

    def _build_upstream(self) -> np.ndarray:
        """The routes into every node, for the upstream telemetry; returns their index
        rows ``(N + 1, 2, U)`` (commodity, fan-out of the source pair)."""
        ix = self.workload.index
        n = ix.num_nodes
        # Routes into every node (ascending), for the upstream telemetry: an agent's own
        # and, relayed, its out-neighbours'. Row n (no neighbour) and padding read node n.
        route_dst = ix.link_dst[ix.route_link]
        into = [np.flatnonzero(route_dst == j) for j in range(n)]
        u_max = max(r.size for r in into)
        self._u_max = u_max
        fanout = np.bincount(ix.route_src_pair, minlength=ix.num_pairs)
        up_src = np.full((n + 1, u_max), n, dtype=np.int64)
        up_comm = np.zeros((n + 1, u_max), dtype=np.int64)
        up_delay = np.zeros((n + 1, u_max), dtype=np.int64)
        up_index = np.full((n + 1, 2, u_max), -1, dtype=np.int64)
        for j, routes in enumerate(into):
            k = routes.size
            up_src[j, :k] = ix.link_src[ix.route_link[routes]]
            up_comm[j, :k] = ix.route_commodity[routes]
            up_delay[j, :k] = self.link_delays[ix.route_link[routes]]
            up_index[j, 0, :k] = ix.route_commodity[routes]
            up_index[j, 1, :k] = fanout[ix.route_src_pair[routes]]
        self._up_src, self._up_comm, self._up_delay = up_src, up_comm, up_delay
        self._up_valid = up_src < n
        self._fanout_max = int(fanout.max(initial=0))

        return up_index

    def _build_candidates(self) -> None:
        """Each agent's candidates (service, route, transfer, retain) and neighbours as
        padded gathers, and what the route and transfer features read."""
        ix = self.workload.index
        lays = self.layouts
        n_ag = len(lays)
        a_max, r_max, t_max, k_max = self._sizes
        nb_max = self._nb_max
        n, s = ix.num_nodes, ix.num_signatures
        self._agent_node = np.asarray([x.node for x in lays], dtype=np.int64)
        self._svc = self._pad([x.actions for x in lays], a_max, ix.num_actions)
        self._route = self._pad([x.routes for x in lays], r_max, ix.num_routes)
        self._transfer = self._pad([x.transfers for x in lays], t_max, ix.num_transfers)
        self._retain = self._pad([x.retains for x in lays], k_max, ix.num_retains)
        self._nb_node = self._pad([x.neighbours for x in lays], nb_max, n)
        self._nb_delay = self._pad([x.neighbour_delays for x in lays], nb_max, 0)
        self._svc_valid = self._svc < ix.num_actions
        self._route_valid = self._route < ix.num_routes
        self._transfer_valid = self._transfer < ix.num_transfers
        self._retain_valid = self._retain < ix.num_retains
        self._nb_valid = self._nb_node < n
        self._route_slot = self._pad([x.route_neighbour for x in lays], r_max, 0)
        self._transfer_slot = self._pad([x.transfer_neighbour for x in lays], t_max, 0)
        route_comm = np.append(ix.route_commodity, 0)[self._route]
        self._route_comm = route_comm
        self._transfer_sig = np.append(ix.transfer_signature, 0)[self._transfer]
        self._rows = np.arange(n_ag)[:, None]
        # Signatures that make commodity c a hit at the head of each route (for the
        # "compatible memory at the destination" bit); S marks padding and reads 0.
        route_dst = np.append(ix.link_dst[ix.route_link], n)[self._route]
        compat: dict[tuple[int, int], list[int]] = {}
        for act in np.flatnonzero(ix.action_signature >= 0):
            key = (int(ix.action_node[act]), int(ix.action_commodity[act]))
            compat.setdefault(key, []).append(int(ix.action_signature[act]))
        width = max([1, *(len(v) for v in compat.values())])
        self._route_sigs = np.full((n_ag, r_max, width), s, dtype=np.int64)
        for q in range(n_ag):
            for k in range(r_max):
                found = compat.get((int(route_dst[q, k]), int(route_comm[q, k])), [])
                self._route_sigs[q, k, : len(found)] = found
        sizes = np.append(ix.signature_size, 0.0)
        self._transfer_size = sizes[np.append(ix.transfer_signature, s)[self._transfer]].astype(
            np.float32
        )
        bandwidth = np.append(ix.link_bandwidth, 0.0)
        self._transfer_bw = bandwidth[np.append(ix.transfer_link, ix.num_links)[self._transfer]]
        self._budget = ix.budget if self.memory else np.zeros(n)

    def _build_static_parts(self, up_index: np.ndarray) -> None:
        """The observation parts that never change: candidate indices, neighbour roles,
        capacities and costs, relays."""
        wl, ix = self.workload, self.workload.index
        lays = self.layouts
        n_ag = len(lays)
        nb_max = self._nb_max
        n = ix.num_nodes
        route_comm = self._route_comm
        sig = np.append(ix.action_signature, -1)
        comm = np.append(ix.action_commodity, -1)
        self._service_index = np.stack([comm[self._svc], sig[self._svc]], axis=1)
        self._route_index = np.stack(
            [
                np.where(self._route_valid, self._route_slot, -1),
                np.where(self._route_valid, route_comm, -1),
            ],
            axis=1,
        )
        self._transfer_index = np.stack(
            [
                np.where(self._transfer_valid, self._transfer_slot, -1),
                np.where(self._transfer_valid, self._transfer_sig, -1),
            ],
            axis=1,
        )
        self._retain_index = np.append(ix.retain_signature, -1)[self._retain]
        roles = np.zeros((n + 1, len(ROLES)), dtype=np.float32)
        roles[np.arange(n), [ROLES.index(node.role) for node in wl.nodes]] = 1.0
        static = np.zeros((n_ag, nb_max, len(NEIGHBOUR_STATIC_FEATURES)), dtype=np.float32)
        static[..., : len(ROLES)] = roles[self._nb_node]
        static[..., len(ROLES)] = np.append(ix.mu, 0.0)[self._nb_node]
        static[..., len(ROLES) + 1] = np.append(self._budget, 0.0)[self._nb_node]
        links = self._pad([x.neighbour_links for x in lays], nb_max, ix.num_links)
        for f, values in enumerate((ix.link_capacity, ix.link_cost, ix.link_bandwidth)):
            static[..., len(ROLES) + 2 + f] = np.append(values.astype(np.float64), 0.0)[links]
        self._nb_static = static
        self._upstream_index = up_index[self._agent_node]
        relay = np.zeros((n_ag, nb_max), dtype=bool)
        for q, x in enumerate(lays):
            relay[q, : len(x.relayed)] = x.relayed
        self._relay = relay
        self._route_cost = np.append(ix.link_cost[ix.route_link], 0.0)[self._route].astype(
            np.float32
        )

    def _build_score_map(self) -> None:
        """Where each agent's action entries go in the global score vector."""
        ix = self.workload.index
        n_ag = len(self.layouts)
        a_max, r_max, t_max, k_max = self._sizes
        offsets = np.cumsum([0, a_max, r_max, t_max])
        global_offsets = np.cumsum([0, ix.num_actions, ix.num_routes, ix.num_transfers])
        local_pos, global_pos = [], []
        d_local = a_max + r_max + t_max + k_max
        for q in range(n_ag):
            for block, (table, valid) in enumerate(
                (
                    (self._svc, self._svc_valid),
                    (self._route, self._route_valid),
                    (self._transfer, self._transfer_valid),
                    (self._retain, self._retain_valid),
                )
            ):
                cols = np.flatnonzero(valid[q])
                local_pos.append(q * d_local + offsets[block] + cols)
                global_pos.append(global_offsets[block] + table[q, cols])
        self._local_pos = np.concatenate(local_pos)
        self._global_pos = np.concatenate(global_pos)
        if np.unique(self._global_pos).size != ix.num_scores:
            raise AssertionError("every candidate must belong to exactly one agent")
        self._d_local = d_local

    def _observation_space(self) -> spaces.Dict:
        ix = self.workload.index
        a, r, t, k = self._sizes
        nb, c, s = self._nb_max, ix.num_commodities, ix.num_signatures
        u = self._u_max
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
                "upstream_index": index((2, u), max(c, self._fanout_max + 1)),
                "neighbour_upstream": box((nb, u)),
                "candidate_mask": spaces.Box(0, 1, (self._d_local,), dtype=np.int8),
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
        n, c, s = (
            self.workload.index.num_nodes,
            self.workload.index.num_commodities,
            self.workload.index.num_signatures,
        )
        depth = self._history
        # Ring buffers of the published telemetry; row N is "no neighbour" and reads 0.
        self._hist_queues = np.zeros((depth, n + 1, c), dtype=np.float32)
        self._hist_memory = np.zeros((depth, n + 1, s), dtype=np.float32)
        self._hist_free = np.zeros((depth, n + 1), dtype=np.float32)
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
        if not isinstance(actions, Mapping):
            raise ValueError(
                f"actions must be a dict from agent name to an array of shape "
                f"({self._d_local},), got {type(actions).__name__}"
            )
        missing = [a for a in self.agents if a not in actions]
        unknown = [a for a in actions if a not in self._by_name]
        if missing or unknown:
            raise ValueError(
                f"actions must name every live agent exactly: missing {missing}, "
                f"unknown {unknown}; agents: {self.agents}"
            )
        stacked = np.empty((len(self.possible_agents), self._d_local), dtype=np.float64)
        for q, name in enumerate(self.possible_agents):
            what = f"action of agent {name!r}"
            action = np.asarray(checked_action(actions[name], what), dtype=np.float64)
            if action.shape != (self._d_local,):
                raise ValueError(
                    f"action of agent {name!r} must have shape "
                    f"({self._d_local},), got {action.shape}"
                )
            stacked[q] = action
        if not np.isfinite(stacked).all():
            bad = [self.possible_agents[q] for q in np.flatnonzero(~np.isfinite(stacked).all(1))]
            raise ValueError(f"actions must be finite floats; NaN or inf from agents {bad}")
        scores = np.empty(self.workload.index.num_scores)
        scores[self._global_pos] = stacked.ravel()[self._local_pos]
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
        state = self.sim.state
        t = state.t
        depth = self._history
        queues = global_obs["queues"]  # (N, C), units in service included
        memory = global_obs["memory"]  # (N, S)
        here = t % depth
        self._hist_queues[here, :-1] = queues
        self._hist_memory[here, :-1] = memory
        self._hist_free[here, :-1] = self._budget - state.memory_used
        # Telemetry of each neighbour slot as it was d slots ago (the episode start before).
        seen = np.maximum(t - self._nb_delay, 0)
        slot = seen % depth
        nb_queues = self._hist_queues[slot, self._nb_node]  # (n_ag, Nb, C)
        nb_memory = self._hist_memory[slot, self._nb_node]  # (n_ag, Nb, S)
        nb_free = self._hist_free[slot, self._nb_node]  # (n_ag, Nb)
        age = np.where(self._nb_valid, t - seen, 0).astype(np.float32)
        # Upstream queue lengths: the agent's own, each as old as its route's link, and each
        # neighbour's as that neighbour received them, relayed over the link to it.
        own_up = self._agent_node
        up_seen = np.maximum(t - self._up_delay[own_up], 0)
        up_queues = self._hist_queues[
            up_seen % depth, self._up_src[own_up], self._up_comm[own_up]
        ]  # (n_ag, U)
        up_age = np.where(self._up_valid[own_up], t - up_seen, 0).astype(np.float32)
        relay_seen = np.maximum(seen[:, :, None] - self._up_delay[self._nb_node], 0)
        nb_upstream = np.where(
            self._relay[:, :, None],
            self._hist_queues[
                relay_seen % depth, self._up_src[self._nb_node], self._up_comm[self._nb_node]
            ],
            np.float32(0.0),
        )  # (n_ag, Nb, U)
        own_queues = queues[self._agent_node]  # (n_ag, C)
        own_memory = memory[self._agent_node]  # (n_ag, S)

        service = _gather_rows(global_obs["service"], self._svc)
        retain = _gather_rows(global_obs["retain"], self._retain)
        route = self._route_features(own_queues, nb_queues, nb_memory)
        transfer, movable = self._transfer_features(own_memory, nb_memory, nb_free)
        local_mask = self._local_mask(global_obs["action_mask"], movable)

        nodes = global_obs["node_features"][self._agent_node]
        ages = self._queue_ages(state, t)[self._agent_node]
        obs = {}
        for q, name in enumerate(self.possible_agents):
            obs[name] = {
                "node": nodes[q],
                "queues": own_queues[q],
                "queue_age": ages[q],
                "memory": own_memory[q],
                "service": service[q],
                "service_index": self._service_index[q].copy(),
                "route": route[q],
                "route_index": self._route_index[q].copy(),
                "transfer": transfer[q],
                "transfer_index": self._transfer_index[q].copy(),
                "retain": retain[q],
                "retain_index": self._retain_index[q].copy(),
                "neighbour_queues": nb_queues[q],
                "neighbour_memory": nb_memory[q],
                "neighbour_age": age[q],
                "neighbour_static": self._nb_static[q].copy(),
                "neighbour_mask": self._nb_valid[q].astype(np.int8),
                "upstream_queues": up_queues[q],
                "upstream_age": up_age[q],
                "upstream_index": self._upstream_index[q].copy(),
                "neighbour_upstream": nb_upstream[q],
                "candidate_mask": local_mask[q],
            }
        return obs

    def _route_features(
        self, own_queues: np.ndarray, nb_queues: np.ndarray, nb_memory: np.ndarray
    ) -> np.ndarray:
        """Each agent's route candidates: backlog difference as the agent sees it, link cost,
        compatible memory at the destination, own backlog.  # (n_ag, R, 4) float32"""
        rows = self._rows
        route = np.zeros((*self._route.shape, len(ROUTE_FEATURES)), dtype=np.float32)
        src = own_queues[rows, self._route_comm]
        dst = nb_queues[rows, self._route_slot, self._route_comm]
        padded_memory = np.concatenate(
            [nb_memory, np.zeros((*nb_memory.shape[:2], 1), dtype=np.float32)], axis=2
        )
        compatible = padded_memory[
            rows[:, :, None], self._route_slot[:, :, None], self._route_sigs
        ].max(axis=2, initial=0.0)
        valid = self._route_valid
        route[..., 0] = np.where(valid, src - dst, 0.0)
        route[..., 1] = self._route_cost
        route[..., 2] = np.where(valid, compatible, 0.0)
        route[..., 3] = np.where(valid, src, 0.0)

        return route

    def _transfer_features(
        self, own_memory: np.ndarray, nb_memory: np.ndarray, nb_free: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each agent's transfer candidates (held here, size, room at the destination) and
        which of them could move now (held here, not there, fits the link and the room)."""
        rows = self._rows
        ix = self.workload.index
        transfer = np.zeros((*self._transfer.shape, len(TRANSFER_FEATURES)), dtype=np.float32)
        if ix.num_signatures:
            holds = own_memory[rows, self._transfer_sig] > 0
            dst_holds = nb_memory[rows, self._transfer_slot, self._transfer_sig] > 0
        else:
            holds = dst_holds = np.zeros(self._transfer.shape, dtype=bool)
        dst_free = nb_free[rows, self._transfer_slot]
        valid = self._transfer_valid
        transfer[..., 0] = holds & valid
        transfer[..., 1] = self._transfer_size
        transfer[..., 2] = np.where(valid, dst_free, 0.0)

        movable = (
            holds
            & ~dst_holds
            & valid
            & (self._transfer_size <= self._transfer_bw)
            & (self._transfer_size <= dst_free + 1e-9)
        )
        return transfer, movable

    def _local_mask(self, mask: np.ndarray, movable: np.ndarray) -> np.ndarray:
        """Each agent's candidate mask: the global mask's service and route entries, the
        movable transfers, every retain candidate.  # (n_ag, D_local) int8"""
        ix = self.workload.index
        n_act, n_route = ix.num_actions, ix.num_routes
        a, r, tt, _ = self._sizes
        local_mask = np.zeros((len(self.layouts), self._d_local), dtype=np.int8)
        local_mask[:, :a] = np.append(mask[:n_act], 0)[self._svc]
        local_mask[:, a : a + r] = np.append(mask[n_act : n_act + n_route], 0)[self._route]
        local_mask[:, a + r : a + r + tt] = movable
        local_mask[:, a + r + tt :] = self._retain_valid
        return local_mask

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
        return np.bincount(ix.pair_node, weights=per_pair, minlength=ix.num_nodes)[self._agent_node]

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
        return per_node[self._agent_node]

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


def _gather_rows(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` of ``table``; the index ``len(table)`` pads with a row of zeros."""
    padded = np.concatenate([table, np.zeros((1, table.shape[1]), dtype=table.dtype)])
    return padded[index]


def _link_delays(workload: Workload, staleness: Any) -> np.ndarray:
    """``(E,)`` telemetry delay per link from the ``staleness`` argument."""
    ix = workload.index
    limit = min(workload.horizon, MAX_STALENESS)
    allowed = (
        "an integer >= 0, a sequence of one integer per link, or a mapping "
        "{(src name, dst name): delay}"
    )

    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(
                f"staleness{where} must be an integer number of slots, got "
                f"{value!r}; staleness is {allowed}"
            )
        if not 0 <= value <= limit:
            raise ValueError(
                f"staleness{where} must be in [0, {limit}] (at most the horizon, "
                f"{workload.horizon}, and {MAX_STALENESS:,} slots: the telemetry buffer keeps "
                f"that many slots of state), got {value}"
            )
        return int(value)

    if isinstance(staleness, Mapping):
        delays = np.zeros(ix.num_links, dtype=np.int64)
        names = {
            (workload.nodes[link.src].name, workload.nodes[link.dst].name): e
            for e, link in enumerate(workload.links)
        }
        for key, value in staleness.items():
            if key not in names:
                raise ValueError(
                    f"staleness names link {key!r}, which does not exist; links: {sorted(names)}"
                )
            delays[names[key]] = check(value, f"[{key!r}]")
        return delays
    sequence = isinstance(staleness, Sequence) and not isinstance(staleness, str)
    if sequence or (isinstance(staleness, np.ndarray) and staleness.ndim > 0):
        values = list(staleness)
        if len(values) != ix.num_links:
            raise ValueError(
                f"staleness as a sequence needs one delay per link "
                f"({ix.num_links}), got {len(values)}"
            )
        return np.asarray([check(v, f"[{e}]") for e, v in enumerate(values)], dtype=np.int64)
    return np.full(ix.num_links, check(staleness, ""), dtype=np.int64)


def _layouts(workload: Workload, delays: np.ndarray, memory: bool) -> list[AgentLayout]:
    ix = workload.index
    route_src = ix.link_src[ix.route_link]
    transfer_src = ix.link_src[ix.transfer_link]
    route_dst = ix.link_dst[ix.route_link]
    # Message of node j to the tails of its links: its backlog on its admissible pairs
    # and, with memory, its residency bits of the signatures it can hold plus its free
    # budget. Over a link that carries transfers it adds the upstream queue lengths it
    # received (one per route into j), relayed so that the tail can value j's memory as j
    # does. Besides, j sends the head of each of its routes its queue length of the
    # route's commodity (one number per route).
    pairs = np.bincount(ix.pair_node, minlength=ix.num_nodes)
    inbound = np.bincount(route_dst, minlength=ix.num_nodes)
    holdable = ix.eligible.sum(axis=1) if memory else np.zeros(ix.num_nodes, dtype=np.int64)
    message = pairs + holdable + (holdable > 0)
    readers = np.zeros(ix.num_nodes, dtype=np.int64)
    relay_readers = np.zeros(ix.num_nodes, dtype=np.int64)
    carries_transfers = np.zeros(ix.num_links, dtype=bool)
    carries_transfers[ix.transfer_link] = True
    layouts = []
    for i, node in enumerate(workload.nodes):
        actions = np.flatnonzero(ix.action_node == i)
        routes = np.flatnonzero(route_src == i)
        transfers = np.flatnonzero(transfer_src == i)
        retains = np.flatnonzero(ix.retain_node == i)
        if not (actions.size or routes.size or transfers.size or retains.size):
            continue
        links = np.flatnonzero(ix.link_src == i)
        neighbours = ix.link_dst[links]
        upstream = np.flatnonzero(route_dst == i)
        slot_of = {int(j): k for k, j in enumerate(neighbours)}
        readers[neighbours] += 1
        relayed = carries_transfers[links]
        relay_readers[neighbours[relayed]] += 1
        layouts.append(
            AgentLayout(
                name=node.name,
                node=i,
                actions=actions,
                routes=routes,
                transfers=transfers,
                retains=retains,
                neighbours=neighbours.copy(),
                neighbour_links=links,
                neighbour_delays=delays[links].copy(),
                route_neighbour=np.asarray(
                    [slot_of[int(ix.link_dst[ix.route_link[r]])] for r in routes], dtype=np.int64
                ),
                transfer_neighbour=np.asarray(
                    [slot_of[int(ix.link_dst[ix.transfer_link[k]])] for k in transfers],
                    dtype=np.int64,
                ),
                upstream_routes=upstream,
                upstream_delays=delays[ix.route_link[upstream]].copy(),
                relayed=relayed,
                telemetry_received=int(
                    message[neighbours].sum() + inbound[neighbours[relayed]].sum() + upstream.size
                ),
                telemetry_sent=0,
            )
        )
    from dataclasses import replace

    # Upstream queue lengths go only to heads that are agents (that read observations).
    is_agent = np.zeros(ix.num_nodes, dtype=bool)
    is_agent[[x.node for x in layouts]] = True
    outbound = np.bincount(route_src[is_agent[route_dst]], minlength=ix.num_nodes)
    return [
        replace(
            x,
            telemetry_sent=int(
                message[x.node] * readers[x.node]
                + inbound[x.node] * relay_readers[x.node]
                + outbound[x.node]
            ),
        )
        for x in layouts
    ]
