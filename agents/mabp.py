"""Memory-Augmented Backpressure (paper Algorithm 2, the one-slot surrogate) and its ablations.

With known primitives and the current memory ``Y`` (SPEC 4; paper (1), (14), (16)-(18)):

- service score ``W_i^a / w_i(a, Y)`` with
  ``W_i^a = Q_i^c - sum_c' P_i(c'|a, Y) Q_i^c' - nu p_i(a, Y)`` (memory-dependent work,
  penalty with reuse credit ``p = l - eta v``, and downstream successor pressure);
- routing ``Q_i^c - Q_j^c - nu d_ij``;
- retention and transfers by the marginal value of an object per unit size (paper (17)-(18),
  SPEC 9.4): the frozen-queue value of (17), ``Psi_i(R + m) - Psi_i(R - m)``, approximated
  action by action as the service weight a hit adds at the node's compute
  (``min(q, mu / w_hit) W_hit^+ - min(q, mu / w_miss) W_miss^+``), plus its value over the
  next ``H`` slots: the evidence of compatible demand (units queued at the node and those
  queued one hop upstream on a route into it, that the node could serve per slot with a hit)
  times the value of one hit (``nu (p_miss - p_hit)`` plus the work it saves priced at the
  node's best pressure per unit of work), net of ``nu`` times the holding cost over ``H``
  slots; a transfer scores the value gained at the destination minus the value lost at the
  source, net of ``nu`` times its migration cost. Demand evidence is an exponential average
  with a memory of ``evidence`` slots (default 4), and it fades at that rate over the
  horizon, so the value of the next ``H`` slots is ``sum_{tau < H} (1 - 1/evidence)^tau``
  times the current evidence: bounded as ``H`` grows. v1 averaged the evidence over ``H``
  slots and multiplied it by ``H``, which kept valuing objects whose queues had moved on
  (at ``H = 20`` it lost to most-recently-used retention; see docs/results.md). Without a
  demand term the memory would thrash: an object whose queue is momentarily empty has
  frozen-queue value 0.

Ablations (paper Fig. 6): ``mabp-no-transition`` drops the successor-pressure term,
``mabp-no-reuse`` drops the reuse credit (``p = l``), ``mabp-no-retention`` keeps memory
most-recently-used instead of by marginal value.

The primitives are an explicit argument (:class:`Primitives`): by default the workload's own
(the "known primitives"); Learn-MABP passes its estimates, Oracle-Sur composes an MABP and
reads its weights and object values through the public methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mabp_gym.agents.base import Policy, RecencyRetention, successor_support
from mabp_gym.agents.mabp_core import MABPStatics, mabp_fill
from mabp_gym.core.index import WorkloadIndex
from mabp_gym.core.kernels import jit
from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Workload

MAX_HORIZON = 100_000
"""The longest memory-value horizon ``H`` MABP takes (slots): far past any episode, and its
value, summed slot by slot when the policy is made, stays under a tenth of a second."""


@dataclass(frozen=True, eq=False)
class Primitives:
    """The primitives MABP scores with, rows indexed by the hit bit (0 miss, 1 hit).

    Attributes:
        work: ``w_i(a, Y)``, ``(2, A)`` float64, >= 0.
        penalty: ``p_i(a, Y)``, ``(2, A)`` float64 (the loss net of any reuse credit).
        law: successor probabilities ``P_i(c'|a, Y)``, ``(2, A, C)`` float64 in [0, 1]; the
            exit probability is the remainder, so each row sums to at most 1.

    Raises:
        ValueError: an array is not finite, has another dimensionality, disagrees with the
            others on ``A``, a work is negative or a successor row is not a sub-probability.
    """

    work: np.ndarray  # (2, A) float64
    penalty: np.ndarray  # (2, A) float64
    law: np.ndarray  # (2, A, C) float64

    def __post_init__(self) -> None:
        work = np.asarray(self.work, dtype=np.float64)
        penalty = np.asarray(self.penalty, dtype=np.float64)
        law = np.asarray(self.law, dtype=np.float64)
        if work.ndim != 2 or work.shape[0] != 2:
            raise ValueError(f"work must have shape (2, A), got {work.shape}")
        if penalty.shape != work.shape:
            raise ValueError(
                f"penalty must have the shape of work {work.shape}, got {penalty.shape}"
            )
        if law.ndim != 3 or law.shape[:2] != work.shape:
            raise ValueError(
                f"law must have shape (2, A, C) with (2, A) = {work.shape}, got {law.shape}"
            )
        for name, array in (("work", work), ("penalty", penalty), ("law", law)):
            if not np.all(np.isfinite(array)):
                raise ValueError(f"{name} must be finite")
        if np.any(work < 0):
            raise ValueError("work must be >= 0")
        if np.any(law < 0) or np.any(law.sum(axis=2) > 1.0 + 1e-9):
            raise ValueError(
                "every successor law row must be probabilities in [0, 1] summing "
                "to at most 1 (the exit is the remainder)"
            )
        object.__setattr__(self, "work", work)
        object.__setattr__(self, "penalty", penalty)
        object.__setattr__(self, "law", law)

    @classmethod
    def known(cls, index: WorkloadIndex, *, reuse: bool = True) -> Primitives:
        """A workload's own primitives from its index (``workload.index``).

        Args:
            index: the workload's index.
            reuse: keep the reuse credit in the penalty (``p = l - eta v``); ``False`` gives
                the loss ``l`` alone (the ``mabp-no-reuse`` ablation).
        """
        return cls(
            work=index.work,
            penalty=index.penalty if reuse else index.loss,
            law=index.successor_law[:, :, : index.num_commodities],
        )

    def check_fits(self, index: WorkloadIndex) -> None:
        """Raise ``ValueError`` unless the shapes are ``(2, A)`` and ``(2, A, C)`` of ``index``."""
        a_n, c_n = index.num_actions, index.num_commodities
        if self.work.shape != (2, a_n) or self.law.shape != (2, a_n, c_n):
            raise ValueError(
                f"primitives of shape work {self.work.shape}, law "
                f"{self.law.shape} do not fit a workload with A = {a_n} actions "
                f"and C = {c_n} commodities: need (2, {a_n}) and "
                f"(2, {a_n}, {c_n})"
            )


WARMUP = jit.Warmup(mabp_fill)
"""When this process's MABPs switch to the kernel (:attr:`MABP.compile_after`)."""


class MABP(Policy):
    """The MABP score rule.

    Args:
        workload: the network.
        primitives: work, penalty and successor law to score with (default: the workload's
            own, :meth:`Primitives.known`, with the reuse credit as ``reuse`` says).
            Explicit primitives are used as given: ``reuse`` then has no effect.
        horizon: ``H``, the slots over which retained memory is valued (default 20).
        evidence: memory of the demand evidence, in slots (default 4); it also sets how
            fast that evidence fades over the horizon.
        transition: keep the successor-pressure term.
        reuse: keep the reuse credit in the penalty.
        retention: marginal-value retention and transfers (else most-recently-used, no
            transfers).
        **kw: :class:`~mabp_gym.agents.base.Policy`'s ``nu`` and ``memory``.

    Attributes:
        primitives: the :class:`Primitives` the rule scores with.
        holding_cost: ``nu * theta * H``, the cost of holding one size unit of memory over
            the horizon.
        migration_cost: ``nu * kappa``, the cost of moving one size unit of an object.
    """

    name = "mabp"
    memory_aware = True
    compile_after = 5_000
    """MABP decisions this process makes with numpy before it compiles the kernel
    (:mod:`mabp_gym.agents.mabp_core`: the same scores, about 4x faster a slot, for about
    1.3 s of compilation once per install, cached on disk after): a short run or a test
    never waits for it, a long evaluation does once. Where numba's disk cache holds the
    kernel already (loading it takes milliseconds) it runs from the first decision, as it
    does with 0."""

    def __init__(
        self,
        workload: Workload,
        *,
        primitives: Primitives | None = None,
        horizon: int = 20,
        transition: bool = True,
        reuse: bool = True,
        retention: bool = True,
        evidence: float = 4.0,
        **kw,
    ) -> None:
        super().__init__(workload, **kw)
        # A bound on the horizon: its value is summed slot by slot when made.
        horizon = check_number(horizon, "horizon", low=1, high=MAX_HORIZON, integer=True)
        evidence = check_number(evidence, "evidence (slots)", low=1)
        ix = self.ix
        if primitives is None:
            primitives = Primitives.known(ix, reuse=reuse)
        elif not isinstance(primitives, Primitives):
            raise TypeError(f"primitives must be a Primitives, got {type(primitives).__name__}")
        primitives.check_fits(ix)
        self.primitives = primitives
        self.horizon = int(horizon)
        self.transition = transition
        self.reuse = reuse
        self.retention = retention
        # Successor laws are sparse: per action the raveled (N * C) positions of its
        # successor queues and their probabilities per hit bit, padded with probability 0
        # at the action's own first position, so the pressure is a gather of width W:
        # positions (A, W), probabilities (2, A, W).
        self._law_positions, self._law = successor_support(ix, primitives.law)
        self._penalty = primitives.penalty  # (2, A)
        self._work = primitives.work  # (2, A)
        self._arange = np.arange(ix.num_actions)
        self._route_cost = ix.link_cost[ix.route_link]
        self._mu = ix.mu[ix.action_node]
        # Retain candidate k = (i, s) collects the actions of node i compatible with s: a
        # segment sum over (candidate, action) member pairs.
        self._member_retain = np.repeat(
            np.arange(ix.num_retains), [len(m) for m in ix.retain_actions]
        ).astype(np.int64)
        self._member_action = np.asarray([a for m in ix.retain_actions for a in m], dtype=np.int64)
        self._assisted = ix.action_signature >= 0
        self._size = ix.signature_size[ix.retain_signature]
        self.holding_cost = self.nu * workload.theta * self.horizon
        src = ix.link_src[ix.transfer_link]
        dst = ix.link_dst[ix.transfer_link]
        self._transfer_src = ix.retain_of[src, ix.transfer_signature]
        self._transfer_dst = ix.retain_of[dst, ix.transfer_signature]
        self.migration_cost = self.nu * workload.migration_cost  # per size unit
        self._demand = np.zeros(ix.num_actions)
        self._object_values_now: np.ndarray | None = None
        self._recency = RecencyRetention(workload)
        self.evidence = float(evidence)
        # Evidence of demand fades by 1 / evidence per slot, so the value of the next H slots
        # sums a geometric series that stays bounded as H grows.
        keep = 1.0 - 1.0 / self.evidence
        self._effective_horizon = float(sum(keep**tau for tau in range(self.horizon)))
        # Compatible units about to arrive: those queued one hop upstream on a route into the
        # action's pair, shared among the destinations the source can route them to.
        fanout = np.bincount(ix.route_src_pair, minlength=ix.num_pairs).astype(np.float64)
        inflow_action, inflow_pair = [], []
        for a in range(ix.num_actions):
            for r in np.flatnonzero(ix.route_dst_pair == ix.action_pair[a]):
                inflow_action.append(a)
                inflow_pair.append(int(ix.route_src_pair[r]))
        self._inflow_action = np.asarray(inflow_action, dtype=np.int64)
        self._inflow_pair = np.asarray(inflow_pair, dtype=np.int64)
        self._inflow_share = 1.0 / np.maximum(fanout[self._inflow_pair], 1.0)
        self._statics: MABPStatics | None | bool = False  # False: not built yet
        self._fill_kernel = jit.Typed(mabp_fill)
        self._eligible: bool | None = None  # whether the kernel computes this rule

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._demand[:] = 0.0
        self._recency.reset()
        self._object_values_now = None

    @property
    def object_values(self) -> np.ndarray | None:
        """The marginal value of holding each retain candidate's object, ``(K,)``, as the
        last :meth:`scores` call computed it (its retain scores are these values per size
        unit net of :attr:`holding_cost`); ``None`` before the first call after
        :meth:`reset` and when that call valued no objects (no retain candidates, or
        ``retention=False``). Computing the values advances the demand average, so they
        are computed once per slot, inside :meth:`scores`, and read here."""
        return self._object_values_now

    def weights(self, queues: np.ndarray) -> np.ndarray:
        """``W_i^a`` under a miss (row 0) and a hit (row 1), ``(2, A)``."""
        ix = self.ix
        own = self.pair_backlog(queues)[ix.action_pair]
        weight = np.broadcast_to(own, (2, ix.num_actions)) - self.nu * self._penalty
        if self.transition:
            weight = weight - (self._law * queues.ravel()[self._law_positions]).sum(axis=2)
        return weight

    def route_weights(self, queues: np.ndarray) -> np.ndarray:
        """The routing scores ``Q_i^c - Q_j^c - nu d_ij`` per route, ``(R,)``."""
        return self._route_weights(self.pair_backlog(queues))

    def _route_weights(self, backlog: np.ndarray) -> np.ndarray:
        ix = self.ix
        return backlog[ix.route_src_pair] - backlog[ix.route_dst_pair] - self.nu * self._route_cost

    def _fill(self, obs, queues, out) -> None:
        ix = self.ix
        self._object_values_now = None
        if self.memory:
            hit = np.asarray(obs["service"])[:, 2].astype(np.int64)
        else:
            hit = np.zeros(ix.num_actions, dtype=np.int64)
        statics = self._compiled_statics()
        if statics is not None:  # the same arithmetic as below, in one compiled call
            value = np.empty(ix.num_retains)
            # The policy's arrays but the queues, whose layout the observation decides.
            self._fill_kernel.call(
                (queues, hit, self.transition, self._demand, statics, out, value),
                plain=queues.flags.c_contiguous and queues.flags.writeable,
            )
            self._object_values_now = value if ix.num_retains else None
            return
        weight = self.weights(queues)
        current = weight[hit, self._arange]
        # Zero work (instant delivery, e.g. a multihop network's destination) ranks first.
        work = np.maximum(self._work[hit, self._arange], 1e-9)
        own = self.pair_backlog(queues)[ix.action_pair]
        out[self.slices[0]] = np.where(own > 0, current / work, -1.0)
        backlog = self.pair_backlog(queues)
        out[self.slices[1]] = self._route_weights(backlog)
        if not ix.num_retains:
            return
        if not self.retention:
            out[self.slices[3]] = self._recency.priorities(queues, self.t)
            return
        value = self._object_values(weight, current / work, own, backlog)
        self._object_values_now = value
        out[self.slices[3]] = value / self._size - self.holding_cost
        if ix.num_transfers:
            gained = value[self._transfer_dst] - value[self._transfer_src]
            size = ix.signature_size[ix.transfer_signature]
            out[self.slices[2]] = gained / size - self.migration_cost

    def _compiled_statics(self) -> MABPStatics | None:
        """The arrays of the compiled decision (:mod:`mabp_gym.agents.mabp_core`), built on
        first use; ``None`` where the numpy path below runs instead: the kernels are not
        compiled (``MABP_GYM_PURE=1``, no numba), retention is most-recently-used, a
        successor law has over 128 outcomes, or a subclass changes a piece of the rule the
        kernel computes."""
        if self._statics is not False:
            return self._statics  # type: ignore[return-value]
        if self._eligible is None:
            # Against the functions the class was defined with: a subclass, or a patch of
            # MABP itself or of this instance, takes the numpy path that calls it.
            own_rule = all(
                getattr(type(self), name) is function and name not in vars(self)
                for name, function in _KERNEL_RULE.items()
            )
            narrow = self._law.shape[2] <= 128  # numpy sums wider rows by another recursion
            retention = self.retention or not self.ix.num_retains
            self._eligible = jit.COMPILED and own_rule and narrow and retention
        if not self._eligible:
            self._statics = None
            return None
        if not WARMUP.due(self.compile_after):
            return None
        ix = self.ix
        self._demand = np.ascontiguousarray(self._demand, dtype=np.float64)
        bounds = [(block.start, block.stop) for block in self.slices]
        self._statics = MABPStatics(
            pair_node=ix.pair_node.astype(np.int64),
            pair_commodity=ix.pair_commodity.astype(np.int64),
            action_pair=ix.action_pair.astype(np.int64),
            action_node=ix.action_node.astype(np.int64),
            penalty=np.ascontiguousarray(self._penalty, dtype=np.float64),
            work=np.ascontiguousarray(self._work, dtype=np.float64),
            law=np.ascontiguousarray(self._law, dtype=np.float64),
            law_positions=np.ascontiguousarray(self._law_positions, dtype=np.int64),
            route_src_pair=ix.route_src_pair.astype(np.int64),
            route_dst_pair=ix.route_dst_pair.astype(np.int64),
            route_cost=np.asarray(self._route_cost, dtype=np.float64),
            mu=np.asarray(self._mu, dtype=np.float64),
            inflow_action=self._inflow_action,
            inflow_pair=self._inflow_pair,
            inflow_share=np.asarray(self._inflow_share, dtype=np.float64),
            assisted=np.asarray(self._assisted, dtype=np.bool_),
            member_retain=self._member_retain,
            member_action=self._member_action,
            retain_size=np.asarray(self._size, dtype=np.float64),
            transfer_src=np.asarray(self._transfer_src, dtype=np.int64),
            transfer_dst=np.asarray(self._transfer_dst, dtype=np.int64),
            transfer_size=np.asarray(ix.signature_size[ix.transfer_signature], dtype=np.float64),
            slices=np.asarray(bounds, dtype=np.int64),
            scalars=np.asarray(
                [
                    self.nu,
                    self.holding_cost,
                    self.migration_cost,
                    self.evidence,
                    self._effective_horizon,
                ],
                dtype=np.float64,
            ),
        )
        return self._statics

    def _object_values(
        self, weight: np.ndarray, ratio: np.ndarray, own: np.ndarray, backlog: np.ndarray
    ) -> np.ndarray:
        """Marginal value of holding each retain candidate's object, ``(K,)``."""
        ix = self.ix
        w_miss, w_hit = np.maximum(self._work, 1e-9)
        positive = np.maximum(weight, 0.0)
        frozen = np.maximum(
            np.minimum(own, self._mu / w_hit) * positive[1]
            - np.minimum(own, self._mu / w_miss) * positive[0],
            0.0,
        )
        # Price of a unit of compute at each node: its best pressure per unit of work.
        price = np.ones(ix.num_nodes)
        np.maximum.at(price, ix.action_node, ratio)
        saved = (
            self.nu * (self._penalty[0] - self._penalty[1])
            + (w_miss - w_hit) * price[ix.action_node]
        )
        coming = own + np.bincount(
            self._inflow_action,
            self._inflow_share * backlog[self._inflow_pair],
            minlength=ix.num_actions,
        )
        servable = np.minimum(coming, self._mu / w_hit)
        rate = 1.0 / self.evidence
        self._demand = (1 - rate) * self._demand + rate * servable
        future = self._effective_horizon * self._demand * np.maximum(saved, 0.0)
        per_action = np.where(self._assisted, frozen + future, 0.0)
        return np.bincount(
            self._member_retain, per_action[self._member_action], minlength=ix.num_retains
        )


_KERNEL_RULE = {
    name: getattr(MABP, name)
    for name in ("weights", "_route_weights", "_object_values", "pair_backlog")
}
"""The pieces of the rule :func:`~mabp_gym.agents.mabp_core.mabp_fill` computes, as
defined: where one is replaced, MABP decides with numpy."""
