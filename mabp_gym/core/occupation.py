"""The occupation-measure bound of paper Thm. 1 (eqs. (6)-(9); SPEC 9.1), as two LPs.

``occupation_bound(workload, exact=True)`` solves the paper's LP itself: one variable per
reachable memory state ``y`` and one-slot control ``gamma``, the stationarity of the memory
chain under the simulator's kernel ``T(y' | y, gamma)`` (7), and the net service rate of
every admissible queue at least its arrival rate (9). It is enumerable only on tiny
instances (see ``EXACT_LIMITS``) and refuses larger ones with a ``ValueError``.

``occupation_bound(workload, exact=False)`` (also ``capacity(workload, "occ")``) is the
per-node relaxation of SPEC 9.1 for any workload: the fluid flow LP of SPEC 2 with every
memory-assisted service rate split into a hit and a miss part, a residency fraction per
node and signature, hits only while resident, the budget on average and at most
``replicas`` copies of a signature, and whole units a slot per node
(:func:`mabp_gym.core.fluid.whole_unit_hull`). It drops causality (an object must be
generated before it is resident), the joint integrality of service with memory, and
transfers, so it bounds the exact LP from above.

Both return the largest ``theta`` such that the arrival vector ``theta * mix`` is in the
region, in requests per slot, like :func:`mabp_gym.core.capacity.capacity`.

**The exact LP, precisely.** Memory states are the sets of ``(node, signature)`` pairs held
(identities of one signature share every primitive, so which replica a node holds does not
matter; this lumping of the simulator's identity-level chain is exact). A one-slot control
is, as in the simulator (SPEC 1 and :func:`mabp_gym.core.control.check_control`):

* a transfer set: each held object moves along at most one link with transfer bandwidth
  toward a node eligible for it that neither holds nor receives a replica; per-link
  bandwidth and destination budgets hold after all transfers (a swap is allowed);
* an integer service vector per node, ``sum_a S_a w(a, R) <= mu_i`` under the post-transfer
  resident set ``R`` (the paper's per-slot constraint; "before queue truncation", as
  Thm. 1 defines ``Gamma(y)``);
* routing within link capacities (memory-independent, so one aggregate flow per route);
* a retention map fixed before outcomes: a priority order per node, kept greedily while it
  fits, the rest dropped (the simulator's rule). With a deterministic generated set this is
  any budget-feasible subset of ``R_i`` plus the generated objects.

Generation follows the simulator: a completed unit of an action with a signature that its
node does not hold (after transfers) generates a replica with probability ``gen_prob``
when fewer than ``replicas`` replicas exist or are being generated, attempts in action
order. So the kernel depends on the service vector only through how many units of such
actions complete (whether any, when ``gen_prob`` is 0 or 1); the LP mixes integer service
vectors per node within that pattern, which is exact because ``g`` is linear in them.

Multi-slot service (a unit whose work exceeds ``mu``) and zero-work actions are outside
the paper's per-slot model; the exact LP refuses them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from mabp_gym.core.fluid import node_hull
from mabp_gym.core.validate import is_real

if TYPE_CHECKING:
    from mabp_gym.core.workload import Workload

EXACT_LIMITS = {
    "memory_pairs": 12,  # (node, signature) pairs a node may hold: at most 2**12 states
    "states": 4096,  # reachable memory states
    "service_vectors": 2000,  # integer service vectors of one node under one memory state
    "columns": 300_000,  # LP variables
}
"""Size limits of the exact LP; a larger instance raises ``ValueError`` naming the size."""

_TOL = 1e-9

State = frozenset  # frozenset[tuple[int, int]]: the (node, signature) pairs held


# -- shared LP pieces ------------------------------------------------------------------------
class _LP:
    """A sparse LP under construction: rows (``<=`` or ``==`` with a right-hand side) and
    columns (bounds and entries) are appended in any order."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float | None] = []
        self.equality: list[bool] = []
        self.rhs: list[float] = []

    def row(self, rhs: float, *, equality: bool = False) -> int:
        self.equality.append(equality)
        self.rhs.append(float(rhs))
        return len(self.rhs) - 1

    def rows_block(self, rhs, *, equality: bool = False) -> int:
        """Append one row per entry of ``rhs``; returns the first row's index."""
        first = len(self.rhs)
        for value in rhs:
            self.row(float(value), equality=equality)
        return first

    def add(
        self, entries: list[tuple[int, float]], low: float = 0.0, high: float | None = None
    ) -> int:
        col = len(self.lower)
        for row, value in entries:
            if value != 0.0:
                self.rows.append(row)
                self.cols.append(col)
                self.vals.append(value)
        self.lower.append(low)
        self.upper.append(high)
        return col

    @property
    def num_cols(self) -> int:
        return len(self.lower)

    def maximize(self, name: str, column: int) -> float:
        """The largest value of ``column`` (``inf`` when unbounded)."""
        matrix = coo_matrix(
            (self.vals, (self.rows, self.cols)), shape=(len(self.rhs), self.num_cols)
        ).tocsr()
        equality = np.asarray(self.equality, dtype=bool)
        rhs = np.asarray(self.rhs)
        objective = np.zeros(self.num_cols)
        objective[column] = -1.0
        ub, eq = ~equality, equality
        result = linprog(
            objective,
            A_ub=matrix[ub] if ub.any() else None,
            b_ub=rhs[ub] if ub.any() else None,
            A_eq=matrix[eq] if eq.any() else None,
            b_eq=rhs[eq] if eq.any() else None,
            bounds=list(zip(self.lower, self.upper, strict=True)),
            method="highs",
        )
        if result.status == 3:
            return float("inf")
        if result.status != 0:
            raise RuntimeError(f"occupation LP failed for {name!r}: {result.message}")
        return float(result.x[column])


def _flow_lp(workload: Workload, *, equality: bool) -> tuple[_LP, int]:
    """The LP's common part: one flow row per admissible pair (row index = pair index;
    ``-g + theta * share``, ``== 0`` as in SPEC 2's fluid LP or ``<= 0`` as in the paper's
    (9)), the column ``theta``, the link rows and one aggregate flow per route candidate
    (routing does not depend on memory)."""
    ix = workload.index
    lp = _LP()
    lp.rows_block(np.zeros(ix.num_pairs), equality=equality)
    theta = lp.add(
        [(int(p), float(share)) for p, share in zip(ix.arrival_pair, ix.arrival_share, strict=True)]
    )
    link0 = lp.rows_block(ix.link_capacity)
    for r in range(ix.num_routes):
        lp.add(
            [
                (int(ix.route_src_pair[r]), -1.0),
                (int(ix.route_dst_pair[r]), 1.0),
                (link0 + int(ix.route_link[r]), 1.0),
            ]
        )
    return lp, theta


def _service_entries(
    workload: Workload, action: int, hit: int, amount: float
) -> list[tuple[int, float]]:
    """``-g`` entries of ``amount`` completed units of ``action`` under hit bit ``hit``:
    the served pair loses them, the successor pairs at the same node gain them."""
    ix = workload.index
    entries = [(int(ix.action_pair[action]), -amount)]
    node = int(ix.action_node[action])
    law = ix.successor_law[hit, action, :-1]
    for c in np.flatnonzero(law):
        entries.append((int(ix.pair_of[node, c]), amount * float(law[c])))
    return entries


def _fixed_state(workload: Workload, initial: int) -> State:
    alternatives = workload.initial_memory
    if not alternatives:
        return frozenset()
    if not 0 <= initial < len(alternatives):
        raise ValueError(
            f"initial must be in [0, {len(alternatives)}) (an initial-memory "
            f"alternative of {workload.name!r}), got {initial!r}"
        )
    return frozenset((int(i), int(s)) for i, s in alternatives[initial])


# -- the per-node relaxation (SPEC 9.1) ----------------------------------------------------
def occupation_relaxation(
    workload: Workload, *, budget_hull: bool = True, initial: int = 0
) -> float:
    """The per-node relaxation of Thm. 1 (SPEC 9.1), requests per slot.

    Args:
        workload: any workload.
        budget_hull: tighten the average budget ``sum_s b_s y(i, s) <= B_i`` by
            inequalities valid for every budget-feasible set (so still an outer bound): an
            object larger than the budget is never resident, and at most ``k_i`` objects
            are, ``k_i`` the most that fit. With equal sizes at a node this is exactly the
            convex hull of the budget-feasible sets (SPEC 9.1's literal constraint is that
            hull only when ``B_i / b`` is an integer). ``False``: SPEC 9.1's constraints as
            written.
        initial: the initial-memory alternative a fixed-memory workload holds.

    Returns:
        The largest ``theta`` with ``theta * mix`` feasible (``inf`` if nothing binds).
    """
    ix = workload.index
    n_n = ix.num_nodes
    eligible = [(int(i), int(s)) for i, s in zip(*np.nonzero(ix.eligible), strict=True)]
    lp, theta = _flow_lp(workload, equality=True)
    compute0 = lp.rows_block(ix.mu)
    # Hits only while resident: hit work on signature s at node i <= mu_i y(i, s).
    resident0 = lp.rows_block(np.zeros(len(eligible)))
    budget0 = lp.rows_block(ix.budget)
    most = [_most_that_fit(workload, i) if budget_hull else len(eligible) for i in range(n_n)]
    card0 = lp.rows_block(most)
    replica0 = lp.rows_block(np.full(ix.num_signatures, workload.replicas))
    sig_rows = {pair: k for k, pair in enumerate(eligible)}
    columns = [
        (a, hit)
        for a in range(ix.num_actions)
        for hit in ((0, 1) if ix.action_signature[a] >= 0 else (0,))
    ]
    hulls = _whole_unit_rows(workload, lp, columns)
    for a, hit in columns:
        i, s = int(ix.action_node[a]), int(ix.action_signature[a])
        entries = _service_entries(workload, a, hit, 1.0)
        work = float(ix.work[hit, a])
        entries.append((compute0 + i, work))
        if hit:
            entries.append((resident0 + sig_rows[i, s], work))
        if (a, hit) in hulls:
            entries.append((hulls[a, hit], 1.0))
        lp.add(entries)
    fixed = workload.fixed_memory
    held = _fixed_state(workload, initial) if fixed else frozenset()
    for (i, s), k in sig_rows.items():
        size = float(ix.signature_size[s])
        entries = [
            (resident0 + k, -float(ix.mu[i])),
            (budget0 + i, size),
            (card0 + i, 1.0),
            (replica0 + s, 1.0),
        ]
        if fixed:
            value = 1.0 if (i, s) in held else 0.0
            lp.add(entries, value, value)
        elif budget_hull and size > ix.budget[i] + _TOL:
            lp.add(entries, 0.0, 0.0)
        else:
            lp.add(entries, 0.0, 1.0)
    return lp.maximize(workload.name, theta)


def _whole_unit_rows(
    workload: Workload, lp: _LP, columns: list[tuple[int, int]]
) -> dict[tuple[int, int], int]:
    """Every node's :func:`~mabp_gym.core.fluid.whole_unit_hull` over its service columns
    ``(action, hit)``: its rows and ``lambda`` columns added to ``lp``; returns the group
    row each service column enters with coefficient 1."""
    ix = workload.index
    rows: dict[tuple[int, int], int] = {}
    for i in range(ix.num_nodes):
        mine = [(a, hit) for a, hit in columns if ix.action_node[a] == i]
        hull = node_hull(ix, i, [float(ix.work[hit, a]) for a, hit in mine])
        if hull is None:
            continue
        one = lp.row(1.0)
        first = lp.rows_block(np.zeros(len(hull.groups)))
        for g, positions in enumerate(hull.groups):
            rows.update({mine[k]: first + g for k in positions})
        for vector in hull.vectors:
            lp.add([(one, 1.0)] + [(first + g, -float(n)) for g, n in enumerate(vector)])
    return rows


def _most_that_fit(workload: Workload, node: int) -> int:
    """The largest number of objects that fit node ``node``'s budget (smallest first)."""
    ix = workload.index
    sizes = np.sort(ix.signature_size[ix.eligible[node]])
    fits = np.cumsum(sizes) <= ix.budget[node] + _TOL
    return int(fits.sum())


# -- the exact LP (paper (6)-(9)) ----------------------------------------------------------
@dataclass(frozen=True)
class _Branch:
    """Controls of one memory state with one post-transfer resident set and one generation
    pattern: the distinct next-state laws (one per retention map) and, per node, the
    integer service vectors of the pattern."""

    resident: State
    hit: tuple[int, ...]  # (A,) hit bit of every action under ``resident``
    laws: tuple[tuple[tuple[State, float], ...], ...]
    service: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]  # (node, vectors)


class _ExactModel:
    """Enumerates memory states and one-slot controls of a tiny workload."""

    def __init__(self, workload: Workload, initial: int) -> None:
        self.workload = workload
        ix = workload.index
        self.ix = ix
        self.fixed = workload.fixed_memory
        self.eligible = (
            []
            if self.fixed
            else [(int(i), int(s)) for i, s in zip(*np.nonzero(ix.eligible), strict=True)]
        )
        # Nodes with a memory-assisted action: their service enters the kernel (generation)
        # and their primitives depend on memory. Every other node's service is
        # memory-independent and enters the LP once, for all states.
        self.memory_nodes = sorted(
            {int(ix.action_node[a]) for a in range(ix.num_actions) if ix.action_signature[a] >= 0}
        )
        self._check_size()
        self.initial = _fixed_state(workload, initial)
        self.size = ix.signature_size.tolist()
        self.budget = ix.budget.tolist()
        self.node_actions = [
            np.flatnonzero(ix.action_node == i).tolist() for i in range(ix.num_nodes)
        ]
        self.transfers = [
            (
                int(ix.link_src[ix.transfer_link[k]]),
                int(ix.link_dst[ix.transfer_link[k]]),
                int(ix.transfer_link[k]),
                int(ix.transfer_signature[k]),
            )
            for k in range(ix.num_transfers)
        ]

    def _check_size(self) -> None:
        ix, wl = self.ix, self.workload
        pairs, limit = len(self.eligible), EXACT_LIMITS["memory_pairs"]
        if pairs > limit:
            raise ValueError(
                f"exact occupation LP: {wl.name!r} has {pairs} (node, signature) pairs that "
                f"memory may hold, up to 2**{pairs} memory states; the exact LP enumerates at "
                f"most {limit} pairs (2**{limit} states). Use exact=False (the relaxation)."
            )
        for a in range(ix.num_actions):
            if int(ix.action_node[a]) not in self.memory_nodes:
                continue
            mu = float(ix.mu[ix.action_node[a]])
            for hit in (0, 1):
                work = float(ix.work[hit, a])
                if work <= 0 or work > mu + _TOL:
                    raise ValueError(
                        f"exact occupation LP: action {a} of {wl.name!r} has work {work:g} "
                        f"({'hit' if hit else 'miss'}) at a node with mu {mu:g} that memory "
                        "acts on; the paper's per-slot model (and so the exact LP) needs "
                        "0 < work <= mu there (no multi-slot service). Use exact=False."
                    )

    # -- one memory state -------------------------------------------------------------------
    def branches(self, state: State) -> Iterator[_Branch]:
        ix = self.ix
        for resident in self._resident_sets(state):
            hit = tuple(
                int((int(ix.action_node[a]), int(ix.action_signature[a])) in resident)
                for a in range(ix.num_actions)
            )
            # Per node: integer service vectors grouped by their generation pattern.
            groups: list[dict[tuple[int, ...], list[tuple[int, ...]]]] = []
            nodes = self.memory_nodes
            for i in nodes:
                groups.append(self._service_groups(i, resident, hit))
            for keys in itertools.product(*(sorted(g) for g in groups)):
                counts = {}
                for i, key in zip(nodes, keys, strict=True):
                    for a, n in zip(self.node_actions[i], key, strict=True):
                        counts[a] = n
                generated = self._generated(resident, counts)
                laws = self._retention_laws(resident, generated)
                service = tuple(
                    (i, tuple(g[key])) for i, g, key in zip(nodes, groups, keys, strict=True)
                )
                yield _Branch(resident, hit, laws, service)

    def _resident_sets(self, state: State) -> list[State]:
        """Post-transfer resident sets reachable from ``state`` (check_control's rules)."""
        if self.fixed or not self.transfers:
            return [state]
        movable = [t for t in self.transfers if (t[0], t[3]) in state and (t[1], t[3]) not in state]
        found = {state}
        for r in range(1, len(movable) + 1):
            for chosen in itertools.combinations(movable, r):
                moved = [(i, s) for i, _, _, s in chosen]
                arriving = [(j, s) for _, j, _, s in chosen]
                if len(set(moved)) < r or len(set(arriving)) < r:
                    continue
                bandwidth: dict[int, float] = {}
                for _, _, e, s in chosen:
                    bandwidth[e] = bandwidth.get(e, 0.0) + self.size[s]
                if any(b > float(self.ix.link_bandwidth[e]) + 1e-6 for e, b in bandwidth.items()):
                    continue
                after = (state - set(moved)) | set(arriving)
                if all(self._used(after, j) <= self.budget[j] + 1e-6 for _, j, _, _ in chosen):
                    found.add(frozenset(after))
        return sorted(found, key=sorted)

    def _used(self, held: State, node: int) -> float:
        return sum(self.size[s] for i, s in held if i == node)

    def _service_groups(
        self, node: int, resident: State, hit: tuple[int, ...]
    ) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        actions = self.node_actions[node]
        groups: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for vector in self.service_vectors(node, hit):
            key = tuple(self._pattern(a, n, resident) for a, n in zip(actions, vector, strict=True))
            groups.setdefault(key, []).append(vector)
        return groups

    def service_vectors(self, node: int, hit: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Integer service vectors of ``node``: ``sum_a S_a w(a) <= mu``."""
        ix = self.ix
        actions = self.node_actions[node]
        mu = float(ix.mu[node])
        work = [float(ix.work[hit[a], a]) for a in actions]
        vectors: list[tuple[int, ...]] = []

        def extend(k: int, left: float, prefix: tuple[int, ...]) -> None:
            if k == len(actions):
                vectors.append(prefix)
                if len(vectors) > EXACT_LIMITS["service_vectors"]:
                    raise ValueError(
                        f"exact occupation LP: node {self.workload.nodes[node].name!r} has more "
                        f"than {EXACT_LIMITS['service_vectors']} integer service vectors; "
                        "use exact=False"
                    )
                return
            for n in range(int((left + _TOL) // work[k]) + 1):
                extend(k + 1, left - n * work[k], (*prefix, n))

        extend(0, mu, ())
        return vectors

    def _pattern(self, action: int, count: int, resident: State) -> int:
        """What of ``count`` completions of ``action`` the memory kernel can see."""
        ix = self.ix
        s = int(ix.action_signature[action])
        g = float(ix.gen_prob[action])
        if self.fixed or s < 0 or g <= 0 or (int(ix.action_node[action]), s) in resident:
            return 0
        return count if g < 1 else min(count, 1)

    def _generated(self, resident: State, counts: dict[int, int]) -> list[tuple[State, float]]:
        """Law of the generated set, attempts in action order (the simulator's)."""
        ix = self.ix
        law: dict[State, float] = {frozenset(): 1.0}
        for a in sorted(counts):
            n = counts[a]
            i, s = int(ix.action_node[a]), int(ix.action_signature[a])
            if n <= 0 or s < 0 or self.fixed:
                continue
            success = 1.0 - (1.0 - float(ix.gen_prob[a])) ** n
            step: dict[State, float] = {}
            for gen, prob in law.items():
                copies = sum(1 for _, t in resident if t == s) + sum(1 for _, t in gen if t == s)
                if (
                    (i, s) in gen
                    or (i, s) in resident
                    or copies >= self.workload.replicas
                    or success <= 0
                ):
                    step[gen] = step.get(gen, 0.0) + prob
                    continue
                grown = gen | {(i, s)}
                step[grown] = step.get(grown, 0.0) + prob * success
                if success < 1:
                    step[gen] = step.get(gen, 0.0) + prob * (1 - success)
            law = step
        return sorted(law.items(), key=lambda item: sorted(item[0]))

    def _retention_laws(
        self, resident: State, generated: list[tuple[State, float]]
    ) -> tuple[tuple[tuple[State, float], ...], ...]:
        """Distinct next-state laws, one per retention map (priority order per node)."""
        if self.fixed:
            return (((resident, 1.0),),)
        nodes = sorted({i for i, _ in resident} | {i for gen, _ in generated for i, _ in gen})
        per_node = [self._node_maps(i, resident, [gen for gen, _ in generated]) for i in nodes]
        laws = set()
        for choice in itertools.product(*per_node):
            law: dict[State, float] = {}
            for k, (_, prob) in enumerate(generated):
                kept = frozenset().union(*(c[k] for c in choice))
                law[kept] = law.get(kept, 0.0) + prob
            laws.add(tuple(sorted(law.items(), key=lambda item: sorted(item[0]))))
        return tuple(sorted(laws, key=repr))

    def _node_maps(
        self, node: int, resident: State, outcomes: list[State]
    ) -> list[tuple[State, ...]]:
        """Distinct functions ``outcome -> kept set`` of node ``node``'s priority maps."""
        mine = [(i, s) for i, s in resident if i == node]
        if len(outcomes) == 1:
            # A deterministic generated set: every budget-feasible subset is some map's
            # choice (positive priority on it, negative on the rest).
            pool = sorted(set(mine) | {p for p in outcomes[0] if p[0] == node})
            maps: list[tuple[State, ...]] = []
            for r in range(len(pool) + 1):
                for subset in itertools.combinations(pool, r):
                    if sum(self.size[s] for _, s in subset) <= self.budget[node] + 1e-6:
                        maps.append((frozenset(subset),))
            return maps
        pool = sorted(set(mine) | {p for gen in outcomes for p in gen if p[0] == node})
        maps_set = set()
        for r in range(len(pool) + 1):
            for order in itertools.permutations(pool, r):
                result = []
                for gen in outcomes:
                    available = set(mine) | {p for p in gen if p[0] == node}
                    kept: list[tuple[int, int]] = []
                    used = 0.0
                    for pair in order:
                        if (
                            pair in available
                            and used + self.size[pair[1]] <= self.budget[node] + 1e-6
                        ):
                            kept.append(pair)
                            used += self.size[pair[1]]
                    result.append(frozenset(kept))
                maps_set.add(tuple(result))
        return sorted(maps_set, key=repr)


def _exact(workload: Workload, initial: int) -> float:
    model = _ExactModel(workload, initial)
    # Reachable memory states (support of (6)-(9)), breadth first from the initial memory.
    order: list[State] = [model.initial]
    index = {model.initial: 0}
    branches: list[list[_Branch]] = []
    k = 0
    while k < len(order):
        mine = list(model.branches(order[k]))
        branches.append(mine)
        for branch in mine:
            for law in branch.laws:
                for nxt, prob in law:
                    if prob > 0 and nxt not in index:
                        index[nxt] = len(order)
                        order.append(nxt)
                        if len(order) > EXACT_LIMITS["states"]:
                            raise ValueError(
                                f"exact occupation LP: {workload.name!r} has more than "
                                f"{EXACT_LIMITS['states']} reachable memory states; use "
                                "exact=False"
                            )
        k += 1

    # Rows: flow (the paper's (9), -g + theta * share <= 0), links, normalization (6),
    # stationarity per state (7), one pattern-mass row per (branch, node), and the rows of
    # the memory-free nodes.
    lp, theta = _flow_lp(workload, equality=False)
    norm = lp.row(1.0, equality=True)
    stat0 = lp.rows_block(np.zeros(len(order)), equality=True)
    _free_node_columns(model, lp)
    for y, mine in enumerate(branches):
        for branch in mine:
            mass0 = lp.rows_block(np.zeros(len(branch.service)), equality=True)
            for law in branch.laws:
                entries = [(norm, 1.0), (stat0 + y, 1.0)]
                entries += [(mass0 + q, -1.0) for q in range(len(branch.service))]
                for nxt, prob in law:
                    entries.append((stat0 + index[nxt], -prob))
                lp.add(_merge(entries))
            for q, (node, vectors) in enumerate(branch.service):
                for vector in vectors:
                    entries = [(mass0 + q, 1.0)]
                    for a, n in zip(model.node_actions[node], vector, strict=True):
                        if n:
                            entries += _service_entries(workload, a, branch.hit[a], float(n))
                    lp.add(_merge(entries))
            if lp.num_cols > EXACT_LIMITS["columns"]:
                raise ValueError(
                    f"exact occupation LP: {workload.name!r} needs more than "
                    f"{EXACT_LIMITS['columns']} LP columns; use exact=False"
                )
    return lp.maximize(workload.name, theta)


def _free_node_columns(model: _ExactModel, lp: _LP) -> None:
    """Service of the nodes memory never acts on, once for all memory states.

    A node whose every work is in ``(0, mu]`` mixes integer service vectors (a convex
    combination row, ``== 1``); otherwise (multi-slot units, zero-work delivery) it gets
    continuous rates under ``sum_a s_a w_a <= mu``, the long-run constraint of the
    simulator's multi-slot service (a node in service carries its compute over, so it is
    attainable). Joint laws of these nodes and memory states do not matter: neither the
    kernel nor their primitives depend on memory, and ``g`` is linear.
    """
    ix = model.ix
    zero_hit = (0,) * ix.num_actions
    for i, actions in enumerate(model.node_actions):
        if not actions or i in model.memory_nodes:
            continue
        mu = float(ix.mu[i])
        work = [float(ix.work[0, a]) for a in actions]
        if all(0 < w <= mu + _TOL for w in work):
            row = lp.row(1.0, equality=True)
            for vector in model.service_vectors(i, zero_hit):
                entries = [(row, 1.0)]
                for a, n in zip(actions, vector, strict=True):
                    if n:
                        entries += _service_entries(model.workload, a, 0, float(n))
                lp.add(_merge(entries))
        else:
            row = lp.row(mu)
            for a, w in zip(actions, work, strict=True):
                lp.add(_merge([*_service_entries(model.workload, a, 0, 1.0), (row, w)]))


def _merge(entries: list[tuple[int, float]]) -> list[tuple[int, float]]:
    total: dict[int, float] = {}
    for row, value in entries:
        total[row] = total.get(row, 0.0) + value
    return [(row, value) for row, value in total.items() if abs(value) > 0.0]


def exact_size(workload: Workload, initial: int = 0) -> dict[str, int]:
    """Sizes of the exact LP of ``workload`` (raises ``ValueError`` beyond ``EXACT_LIMITS``)."""
    model = _ExactModel(workload, initial)
    seen, todo, controls = {model.initial}, [model.initial], 0
    while todo:
        for branch in model.branches(todo.pop()):
            controls += len(branch.laws)
            for law in branch.laws:
                for nxt, prob in law:
                    if prob > 0 and nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
    return {"memory_pairs": len(model.eligible), "states": len(seen), "controls": controls}


def occupation_bound(
    workload: Workload, exact: bool = False, *, budget_hull: bool = True, initial: int = 0
) -> float:
    """The occupation-measure bound of paper Thm. 1 in requests per slot.

    Args:
        workload: the network.
        exact: solve the paper's LP (6)-(9) over enumerated memory states and controls
            (tiny instances only, see ``EXACT_LIMITS``), else the per-node relaxation of
            SPEC 9.1 (any workload).
        budget_hull: relaxation only: the budget inequalities valid for every
            budget-feasible set (see :func:`occupation_relaxation`); ``False`` for SPEC
            9.1's constraints as written.
        initial: the initial-memory alternative (the exact LP's ``y^0``; for a
            fixed-memory workload, the memory held).

    Returns:
        The largest ``theta`` such that ``theta * mix`` satisfies the bound's LP.

    Raises:
        ValueError: ``exact=True`` on an instance beyond ``EXACT_LIMITS`` or outside the
            paper's per-slot model (multi-slot or zero-work service).
    """
    for name, flag in (("exact", exact), ("budget_hull", budget_hull)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    if not is_real(initial) or not math.isfinite(initial) or int(initial) != initial or initial < 0:
        raise ValueError(f"initial must be an integer >= 0, got {initial!r}")
    if initial and not exact and not workload.fixed_memory:
        raise ValueError(
            f"initial={initial!r} selects the memory a fixed-memory workload holds (or, with "
            f"exact=True, the exact LP's initial state); {workload.name!r} has no fixed memory"
        )
    if exact:
        return _exact(workload, int(initial))
    return occupation_relaxation(workload, budget_hull=budget_hull, initial=int(initial))


__all__ = ["EXACT_LIMITS", "exact_size", "occupation_bound", "occupation_relaxation"]
