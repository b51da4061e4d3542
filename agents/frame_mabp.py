"""Frame-MABP: an implementable approximation of the paper's exact frame-MABP (Thm. 3; SPEC 9.5).

The occupation bound (paper Thm. 1, :mod:`mabp_gym.core.occupation`) is reached by a node that
holds one object while units of its state type queue up and serves them as a batch of hits
behind one miss. The one-slot surrogate (``mabp``) does not plan that: it ranks a miss of
a long queue above the hits of a short one, so the miss's generated object evicts an object
whose batch was still coming. Frame-MABP plans, every slot, a rolling frame of ``H`` slots:

1. **Frame plan per node** (which objects to hold for the next ``H`` slots): the value of
   holding object ``k`` over the frame is the work its hits save,
   ``(w_miss - w_hit) * min(D_k, H mu / w_hit)``, where ``D_k`` is the frame demand of the
   compatible actions (queued units plus ``H`` times a smoothed arrival estimate); an
   object not yet held pays its acquisition, one miss (``w_miss``). The plan is the
   budget-feasible set of largest net value: greedy by value when a node's objects have
   equal sizes (exact then, as at every node of ``mixed``), by enumeration of subsets when
   sizes differ and there are at most ``EXACT_PLAN_OBJECTS`` candidates, else greedy by
   value per size (approximate).
2. **Batching service**: at a node, every hit ranks above every miss; a miss of a planned
   object not yet held (the acquisition: its completion generates the object) ranks above
   the other misses. A miss outside the plan is served only when its object can never fit
   the node, or when the node has no hit or acquisition to serve and its expected work
   under the plan is below ``slack * mu``; otherwise its queue builds until the plan takes
   the object. Within a class MABP's own order (``W / w``) is kept.
3. **Retention by the plan**: planned objects first (by net value per size), then the
   others in MABP's order while they fit (MABP's drops stay drops); nothing planned is
   evicted by a generated object that is not.
4. **Affinity routing**: BP differentials with queues counted in work under the plan
   (``Q_j * w_j(c) / w_hit(c)``, ``w_j(c)`` a hit's work where ``j`` holds or plans the
   object, a miss's otherwise), relative to the best server of ``c`` when the source does
   not serve ``c``, so units of one state type go where their object is and batches form
   there. Routes between two servers of ``c`` are capped (in ``control``) at the amount
   that balances their queues in work: the shared projection moves the whole queue, which
   would send it back and forth between siblings.

MABP itself (``mabp_gym.agents.mabp.MABP``) is composed, not subclassed: its public ``scores`` and
``weights`` give the base order, so its retention internals may change freely. Transfers
are not used (scores -1); the plan acquires objects by one miss instead.

This is not the paper's exact frame oracle (a causal ``H``-slot stochastic control problem
over memory and queues, intractable beyond toy sizes): the plan is per node, on expected
demand, and re-made every slot (rolling horizon). Its measured effect is in
``docs/occupation.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from mabp_gym.agents.base import Policy
from mabp_gym.agents.frame_mabp_core import (
    ACQUIRE_OFFSET,
    EXACT_PLAN_OBJECTS,
    HIT_OFFSET,
    FrameStatics,
    frame_after,
    frame_fill,
)
from mabp_gym.agents.mabp import MABP
from mabp_gym.core.control import Control
from mabp_gym.core.kernels import jit
from mabp_gym.core.projection import project_own
from mabp_gym.core.state import SimState
from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Workload

WARMUP = jit.Warmup(frame_fill)
"""When this process's frame-MABPs switch to the kernels (:attr:`FrameMABP.compile_after`)."""


class FrameMABP(Policy):
    """Rolling-horizon frame-MABP over the shared projection.

    Args:
        workload: the network.
        frame: ``H``, the slots of the planning frame (default 10).
        smoothing: time constant, in slots, of the arrival estimate (default ``frame``).
        slack: a miss outside the plan is served on otherwise idle compute only while the
            node's expected work under the plan is below ``slack * mu`` (default 1).
        switch: the cost of replacing a held object that still has demand, in misses
            (default 1: the newcomer's miss; 2 would also count the evicted object's miss
            later, which measured worse on tuning seeds 10-11).
        nu, memory: as for every policy.
        **mabp_kw: passed to the composed :class:`mabp_gym.agents.mabp.MABP`.
    """

    name = "frame-mabp"
    memory_aware = True
    compile_after = 20_000
    """Frame-MABP decisions this process makes with numpy before it compiles its kernels
    (:mod:`mabp_gym.agents.frame_mabp_core`: the same scores and controls, about three
    times faster a decision, for several seconds of compilation once per install, cached
    on disk after). The compilation costs about what this many decisions save, so a run
    pays at most about twice what knowing its length would have cost; a short run or a
    test never waits for it. Where numba's disk cache holds the kernels already they run
    from the first decision."""

    def __init__(
        self,
        workload: Workload,
        *,
        frame: int = 10,
        smoothing: float | None = None,
        slack: float = 1.0,
        switch: float = 1.0,
        nu: float = 5.0,
        memory: bool = True,
        **mabp_kw: Any,
    ) -> None:
        super().__init__(workload, nu=nu, memory=memory)
        self.frame = int(check_number(frame, "frame (slots)", low=1, integer=True))
        self.smoothing = float(
            check_number(frame if smoothing is None else smoothing, "smoothing (slots)", low=1)
        )
        self.slack = float(check_number(slack, "slack", low=0.0, high=1.0))
        self.switch = float(check_number(switch, "switch", low=1.0))
        self.mabp = MABP(workload, nu=nu, memory=memory, **mabp_kw)
        ix = self.ix
        self._arange = np.arange(ix.num_actions)
        self._assisted = ix.action_signature >= 0
        self._saved = np.where(self._assisted, ix.work[0] - ix.work[1], 0.0)
        # Retain candidate k = (i, s) and its compatible actions: a segment sum over
        # (candidate, action) member pairs, each candidate's in action order.
        self._members: list[list[int]] = [[] for _ in range(ix.num_retains)]
        self._retain_of_action = np.full(ix.num_actions, -1, dtype=np.int64)
        for a in np.flatnonzero(self._assisted):
            k = ix.retain_of[ix.action_node[a], ix.action_signature[a]]
            if k >= 0:
                self._members[k].append(int(a))
                self._retain_of_action[a] = k
        self._member_retain = np.repeat(
            np.arange(ix.num_retains), [len(m) for m in self._members]
        ).astype(np.int64)
        self._member_action = np.asarray([a for m in self._members for a in m], dtype=np.int64)
        self._retain_cost = np.array([ix.work[0, m[0]] if m else 0.0 for m in self._members])
        self._node_retains = [np.flatnonzero(ix.retain_node == i) for i in range(ix.num_nodes)]
        self._size = ix.signature_size[ix.retain_signature]
        self._previous = np.zeros(ix.num_actions)
        self._arrival = np.zeros(ix.num_actions)
        self._served = np.zeros(ix.num_actions)
        self._ratio = np.ones((ix.num_nodes, ix.num_commodities))
        self.planned = np.zeros(ix.num_retains, dtype=bool)
        self._statics: FrameStatics | None | bool = False  # False: not built yet
        self._fill_kernel, self._after = jit.Typed(frame_fill), jit.Typed(frame_after)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.mabp.reset(seed)
        self._previous[:] = 0.0
        self._arrival[:] = 0.0
        self._served[:] = 0.0
        self.planned[:] = False

    def act(self, obs: dict[str, np.ndarray] | None, state: SimState) -> Control:
        """The :class:`mabp_gym.policy.Policy` decision: :meth:`control`."""
        assert obs is not None, "frame-MABP observes (observes = True)"
        return self.control(state, obs)

    def control(self, state: SimState, obs: dict[str, np.ndarray]) -> Control:
        """Scores projected by the shared projection; remembering what the control serves
        makes the arrival estimate exact (units in = change of the queue + units out).

        Through ``scores`` alone (a Gymnasium loop) the policy does not see the executed
        control and estimates arrivals from queue increases only, which undercounts the
        units served in the slot they arrive."""
        control = project_own(self.workload, state, self.scores(obs), memory=self.memory)
        statics = self._statics
        if statics:  # the same arithmetic as below, in one compiled call
            route = control.route.copy()
            backlog = state.backlog_pairs(self.workload).astype(np.float64)
            served = np.empty(self.ix.num_actions)
            service, start = control.service, control.start
            live = self._after.call(
                (route, service, start, backlog, self._ratio, statics, served),
                plain=service.flags.c_contiguous and start.flags.c_contiguous,
            )
            self._served = served
            return dataclasses.replace(control, route=route) if live else control
        control = self._balance_siblings(control, state)
        served = control.service.astype(np.float64)
        for a in control.start.tolist():
            if a >= 0:
                served[a] += 1.0
        # Served units leave the queue the action reads (several actions may share one).
        ix = self.ix
        by_pair = np.bincount(ix.action_pair, weights=served, minlength=ix.num_pairs)
        self._served = by_pair[ix.action_pair]
        return control

    def _balance_siblings(self, control: Control, state: SimState) -> Control:
        """Cap routes between two servers of a commodity at the amount that balances their
        queues counted in work (the projection moves the whole queue, which sends it back
        and forth between siblings). Lowering route amounts keeps the control feasible."""
        ix = self.ix
        route = control.route.copy()
        live = np.flatnonzero(route)
        if not live.size:
            return control
        backlog = state.backlog_pairs(self.workload).astype(np.float64)
        src = ix.link_src[ix.route_link[live]]
        dst = ix.link_dst[ix.route_link[live]]
        c = ix.route_commodity[live]
        sibling = ix.serves[src, c]
        r_src, r_dst = self._ratio[src, c], self._ratio[dst, c]
        excess = (
            backlog[ix.route_src_pair[live]] * r_src - backlog[ix.route_dst_pair[live]] * r_dst
        ) / (r_src + r_dst)
        cap = np.maximum(np.floor(excess), 0).astype(np.int64)
        route[live] = np.where(sibling, np.minimum(route[live], cap), route[live])
        return dataclasses.replace(control, route=route)

    def _compiled_statics(self) -> FrameStatics | None:
        """The arrays of the compiled decision (:mod:`mabp_gym.agents.frame_mabp_core`),
        built on first use; ``None`` where the numpy path runs instead: the kernels are not
        compiled (``MABP_GYM_PURE=1``, no numba) or a subclass changes a piece of the rule
        the kernels compute."""
        if self._statics is not False:
            return self._statics  # type: ignore[return-value]
        own_rule = all(
            getattr(type(self), name) is function and name not in vars(self)
            for name, function in _KERNEL_RULE.items()
        )
        if not (jit.COMPILED and own_rule):
            self._statics = None
            return None
        if not WARMUP.due(self.compile_after):
            return None
        ix = self.ix
        bounds = [(block.start, block.stop) for block in self.slices]
        node_retains = np.concatenate(
            [np.zeros(0, dtype=np.int64), *(r.astype(np.int64) for r in self._node_retains)]
        )
        node_start = np.cumsum([0] + [len(r) for r in self._node_retains]).astype(np.int64)
        self._statics = FrameStatics(
            pair_node=ix.pair_node.astype(np.int64),
            pair_commodity=ix.pair_commodity.astype(np.int64),
            action_pair=ix.action_pair.astype(np.int64),
            action_node=ix.action_node.astype(np.int64),
            action_commodity=ix.action_commodity.astype(np.int64),
            assisted=np.asarray(self._assisted, dtype=np.bool_),
            retain_of_action=self._retain_of_action,
            member_retain=self._member_retain,
            member_action=self._member_action,
            saved=np.asarray(self._saved, dtype=np.float64),
            action_mu=np.asarray(ix.mu[ix.action_node], dtype=np.float64),
            work=np.ascontiguousarray(ix.work, dtype=np.float64),
            retain_cost=np.asarray(self._retain_cost, dtype=np.float64),
            retain_size=np.asarray(self._size, dtype=np.float64),
            node_retain_start=node_start,
            node_retains=node_retains,
            budget=np.asarray(ix.budget, dtype=np.float64),
            mu=np.asarray(ix.mu, dtype=np.float64),
            serves=np.ascontiguousarray(ix.serves, dtype=np.bool_),
            route_src=ix.link_src[ix.route_link].astype(np.int64),
            route_dst=ix.link_dst[ix.route_link].astype(np.int64),
            route_commodity=ix.route_commodity.astype(np.int64),
            route_src_pair=ix.route_src_pair.astype(np.int64),
            route_dst_pair=ix.route_dst_pair.astype(np.int64),
            route_cost=np.asarray(ix.link_cost[ix.route_link], dtype=np.float64),
            slices=np.asarray(bounds, dtype=np.int64),
            scalars=np.asarray(
                [self.frame, self.smoothing, self.slack, self.switch, self.nu, self.memory],
                dtype=np.float64,
            ),
        )
        return self._statics

    def _fill_compiled(
        self, obs: dict[str, np.ndarray], queues: np.ndarray, statics: FrameStatics, out: np.ndarray
    ) -> None:
        """:meth:`_fill` after MABP's scores, by :func:`frame_fill`."""
        ix = self.ix
        if self.memory and ix.num_retains:  # the bits the memory part reads
            held = np.asarray(obs["retain"])[:, 0] > 0.5
            hit = np.asarray(obs["service"])[:, 2] > 0.5
        else:
            held, hit = np.zeros(ix.num_retains, dtype=bool), np.zeros(ix.num_actions, dtype=bool)
        net = np.empty(ix.num_retains)
        planned = np.zeros(ix.num_retains, dtype=bool)
        state = (self._previous, self._arrival, self._served, self._ratio)
        args = (queues, held, hit, statics, *state, net, planned, out)
        # The policy's arrays but the queues, whose layout the observation decides.
        if self._fill_kernel.call(args, plain=queues.flags.c_contiguous and queues.flags.writeable):
            self.planned = planned

    # -- the frame plan -----------------------------------------------------------------------
    def frame_values(self, own: np.ndarray, held: np.ndarray) -> np.ndarray:
        """Net value over the frame of holding each retain candidate, ``(K,)``, in units
        of compute: work saved by its hits minus one miss when it is not yet held."""
        ix = self.ix
        demand = own + self.frame * self._arrival
        mu = ix.mu[ix.action_node]
        batch = np.minimum(demand, self.frame * mu / np.maximum(ix.work[1], 1e-9))
        per_action = np.where(self._assisted, batch * self._saved, 0.0)
        value = np.bincount(
            self._member_retain, per_action[self._member_action], minlength=ix.num_retains
        )
        cost = self._retain_cost
        # A held object with demand in the frame is worth its re-acquisition too: dropping
        # it costs one miss now for the newcomer and one later to get it back.
        kept = np.where(value > 0, self.switch - 1.0, 0.0) * cost
        return value - np.where(held, -kept, cost)

    def plan(self, net: np.ndarray) -> np.ndarray:
        """Budget-feasible set of largest net value per node, ``(K,)`` bool."""
        ix = self.ix
        chosen = np.zeros(ix.num_retains, dtype=bool)
        for i, retains in enumerate(self._node_retains):
            useful = retains[net[retains] > 0]
            if not useful.size:
                continue
            budget = float(ix.budget[i]) + 1e-9
            sizes = self._size[useful]
            if useful.size <= EXACT_PLAN_OBJECTS and sizes.max() > sizes.min():
                best, best_value = (), 0.0
                for r in range(1, useful.size + 1):
                    for subset in itertools.combinations(useful.tolist(), r):
                        if self._size[list(subset)].sum() <= budget:
                            total = net[list(subset)].sum()
                            if total > best_value:
                                best, best_value = subset, total
                chosen[list(best)] = True
            else:
                used = 0.0
                for k in useful[np.argsort(-net[useful] / self._size[useful], kind="stable")]:
                    if used + self._size[k] <= budget:
                        chosen[k] = True
                        used += self._size[k]
        return chosen

    # -- scores -------------------------------------------------------------------------------
    def _fill(self, obs: dict[str, np.ndarray], queues: np.ndarray, out: np.ndarray) -> None:
        ix = self.ix
        base = self.mabp.scores(obs)
        out[:] = base
        statics = self._compiled_statics()
        if statics is not None:  # the same arithmetic as below, in one compiled call
            self._fill_compiled(obs, queues, statics, out)
            return
        own = self.pair_backlog(queues)[ix.action_pair]
        rate = 1.0 / self.smoothing
        arrived = np.maximum(own - self._previous + self._served, 0.0)
        self._arrival = (1 - rate) * self._arrival + rate * arrived
        self._previous = own.copy()
        self._served[:] = 0.0
        if not self.memory or not ix.num_retains:
            return
        held = np.asarray(obs["retain"])[:, 0] > 0.5
        hit = np.asarray(obs["service"])[:, 2] > 0.5
        net = self.frame_values(own, held)
        planned = self.plan(net)
        self.planned = planned

        # Service: hits, then acquisitions of planned objects, then other misses.
        service = base[self.slices[0]].copy()
        k_of = self._retain_of_action
        acquiring = (~hit) & (k_of >= 0) & planned[np.maximum(k_of, 0)] & ~held[np.maximum(k_of, 0)]
        live = (own > 0) & (service > 0)
        hit_now = live & hit & self._assisted
        service = np.where(hit_now, service + HIT_OFFSET, service)
        service = np.where(live & acquiring, service + ACQUIRE_OFFSET, service)
        # A miss of an object outside the plan breaks a batch: its queue is left to grow
        # until the plan takes the object (one miss, then hits). It is served only when
        # its object can never fit, or when the node would otherwise idle and its expected
        # work under the plan leaves slack (so low loads do not wait for batches).
        unplanned = (~hit) & self._assisted & (k_of >= 0) & ~planned[np.maximum(k_of, 0)]
        fits = self._size[np.maximum(k_of, 0)] <= ix.budget[ix.action_node] + 1e-9
        node = ix.action_node
        busy = (
            np.bincount(
                node, weights=(hit_now | (live & acquiring)).astype(float), minlength=ix.num_nodes
            )
            > 0
        )
        covered = np.ones(ix.num_actions, dtype=bool)
        covered[self._assisted] = False
        ok_k = held | planned
        covered[k_of >= 0] = ok_k[k_of[k_of >= 0]]
        work = np.where(covered, ix.work[1], ix.work[0])
        expected = np.bincount(node, weights=self._arrival * work, minlength=ix.num_nodes)
        slack = expected < self.slack * ix.mu
        allowed = ~fits | (~busy[node] & slack[node])
        service = np.where(unplanned & ~allowed, -1.0, service)
        out[self.slices[0]] = service

        # Retention: planned by net value per size, the rest in MABP's order below them.
        retain = base[self.slices[3]]
        out[self.slices[3]] = np.where(
            planned, HIT_OFFSET + net / self._size, np.clip(retain, -1.0, ACQUIRE_OFFSET - 1.0)
        )
        if ix.num_transfers:
            out[self.slices[2]] = -1.0

        # Affinity routing. Between two servers of c both queues count in work under the
        # plan (a unit waiting where it would miss weighs its miss work; amounts are capped
        # in ``control``). From elsewhere (the ingress, an upstream stage) the destination
        # queue counts in work relative to the best server of c, so units leave as in BP
        # but go where their object is held or planned.
        ratio = np.ones((ix.num_nodes, ix.num_commodities))
        assisted = np.flatnonzero(self._assisted & (k_of >= 0))
        ok = (held | planned)[k_of[assisted]]
        work_ratio = ix.work[0, assisted] / np.maximum(ix.work[1, assisted], 1e-9)
        ratio[ix.action_node[assisted], ix.action_commodity[assisted]] = np.where(
            ok, 1.0, work_ratio
        )
        self._ratio = ratio
        best = np.where(ix.serves, ratio, np.inf).min(axis=0)
        best = np.where(np.isfinite(best), best, 1.0)
        backlog = self.pair_backlog(queues)
        src = ix.link_src[ix.route_link]
        dst = ix.link_dst[ix.route_link]
        c = ix.route_commodity
        sibling = ix.serves[src, c]
        q_src = backlog[ix.route_src_pair] * np.where(sibling, ratio[src, c], 1.0)
        q_dst = backlog[ix.route_dst_pair] * ratio[dst, c] / np.where(sibling, 1.0, best[c])
        out[self.slices[1]] = q_src - q_dst - self.nu * ix.link_cost[ix.route_link]


_KERNEL_RULE = {
    name: getattr(FrameMABP, name)
    for name in ("frame_values", "plan", "_balance_siblings", "pair_backlog")
}
"""The pieces of the rule :mod:`~mabp_gym.agents.frame_mabp_core` computes, as defined:
where one is replaced, frame-MABP decides with numpy."""
