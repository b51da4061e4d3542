"""Oracle-Sur's slot program as kernels: the service-and-starts program of one slot, built
for HiGHS, and the reading of its solution (compiled by numba where it is there, plain
Python otherwise: :mod:`mabp_gym.core.kernels.jit`). The routing of what service leaves
is a program of its own (:func:`leftover_routes`). ``tests/test_oracle.py`` holds the
controls to brute force on small workloads, and ``tests/test_slot_golden.py`` to golden
digests.

The program's columns are the service ``S_a`` of the actions in ``serve``, then a start
binary ``x_a`` and its compute ``c_a`` per action in ``starts``; its packing rows are
node compute, link capacity (no entries here) and queue per pair. Only the hard nodes'
columns go to HiGHS (``kept``): their binding rows, then one coupling row
``c_a - avail_i x_a <= 0`` per start at a hard node, then one row ``sum x_a <= 1`` per
node with a start at a hard node (empty where it has only one).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mabp_gym.core.control import EPS as _EPS
from mabp_gym.core.kernels import jit

_compiled = jit.kernel

SERVE, BINARY, COMPUTE = 0, 1, 2
"""The kinds of a kept column."""


class SlotModel(NamedTuple):
    """What :func:`slot_program` returns, by name."""

    service: np.ndarray  # (A,) int64, the easy nodes' service (the hard ones' written later)
    start: np.ndarray  # (N,) int64, the easy nodes' starts, -1 elsewhere
    kind: np.ndarray  # (n,) int64, SERVE / BINARY / COMPUTE of each kept column
    action: np.ndarray  # (n,) int64, its action
    cost: np.ndarray  # (n,) float64, minimized: minus the objective coefficient
    upper: np.ndarray  # (n,) float64, its upper bound (lower bounds are 0)
    integral: np.ndarray  # (n,) float64, 1 integer, 0 continuous
    indptr: np.ndarray  # (n + 1,) int32, compressed columns
    indices: np.ndarray  # (nnz,) int32, row of each entry
    data: np.ndarray  # (nnz,) float64
    bound: np.ndarray  # (rows,) float64, right-hand side of each row (all <=)


@_compiled
def slot_program(
    gain,
    work,
    node_mu,
    avail,
    queue,
    action_node,
    action_pair,
    pair_node,
    link_src,
    link_capacity,
):  # pragma: no cover - compiled
    """The closed-form service and starts of the nodes that are not hard, and the MILP of
    the hard ones.

    Returns:
        ``service`` ``(A,)`` and ``start`` ``(N,)`` of the easy nodes; the kept columns'
        ``kind`` (:data:`SERVE`, :data:`BINARY`, :data:`COMPUTE`), ``action``, ``cost``,
        ``upper`` and ``integral``; the matrix as compressed columns (``indptr``,
        ``indices``, ``data``); ``bound`` of each row.
    """
    n_nodes = avail.shape[0]
    # Packing rows, in three blocks: node compute, link capacity, queue per pair.
    queue_row0 = n_nodes + link_capacity.shape[0]
    serve, serve_upper, starts = _variables(
        gain, work, node_mu, avail, queue, action_node, action_pair
    )
    binding, hard = _hard_nodes(
        serve,
        serve_upper,
        starts,
        work,
        avail,
        queue,
        action_node,
        action_pair,
        pair_node,
        link_src,
        link_capacity,
    )
    service, start = _closed_form(serve, serve_upper, starts, hard, gain, work, action_node)
    # The hard program: its rows (binding rows renumbered in order, one coupling row per
    # start at a hard node, one-start rows), then its columns and their entries.
    renumber, n_used, n_rows, hard_start, per_node, one_start_row = _hard_rows(
        binding, hard, starts, action_node, pair_node, link_src, queue_row0
    )
    m = hard_start.shape[0]
    kind, action, cost, upper, integral, indptr, indices, data = _hard_columns(
        serve,
        serve_upper,
        starts[hard_start],
        hard,
        renumber,
        n_used,
        per_node,
        one_start_row,
        gain,
        work,
        avail,
        action_node,
        action_pair,
        queue_row0,
    )
    bound = np.empty(n_rows)
    for r in range(renumber.shape[0]):
        if renumber[r] >= 0:
            if r < n_nodes:
                bound[renumber[r]] = avail[r]
            elif r < queue_row0:
                bound[renumber[r]] = float(link_capacity[r - n_nodes])
            else:
                bound[renumber[r]] = float(queue[r - queue_row0])
    for j in range(m):
        bound[n_used + j] = 0.0
    for r in range(n_used + m, bound.shape[0]):
        bound[r] = 1.0
    return service, start, kind, action, cost, upper, integral, indptr, indices, data, bound


@jit.part
def _variables(gain, work, node_mu, avail, queue, action_node, action_pair):  # pragma: no cover
    """The program's variables: service of whole units that fit the node's ``mu`` (with
    their queue and compute bound), a start for units that do not; weight <= 0 left out.
    Returns ``(serve, serve_upper, starts)``."""
    n_act = gain.shape[0]
    serve = np.empty(n_act, dtype=np.int64)
    serve_upper = np.empty(n_act)
    starts = np.empty(n_act, dtype=np.int64)
    ns = 0
    nx = 0
    for a in range(n_act):
        i = action_node[a]
        waiting = queue[action_pair[a]]
        fits = work[a] <= node_mu[a] + _EPS
        if not (gain[a] > 0 and waiting > 0):
            continue
        if fits and avail[i] >= work[a] - _EPS:
            serve[ns] = a
            serve_upper[ns] = min(float(waiting), np.floor((avail[i] + _EPS) / max(work[a], _EPS)))
            ns += 1
        elif not fits and avail[i] > _EPS:
            starts[nx] = a
            nx += 1
    return serve[:ns], serve_upper[:ns], starts[:nx]


@jit.part
def _hard_nodes(
    serve,
    serve_upper,
    starts,
    work,
    avail,
    queue,
    action_node,
    action_pair,
    pair_node,
    link_src,
    link_capacity,
):  # pragma: no cover - compiled
    """Binding rows and hard nodes: a row binds when what the variables' upper bounds reach
    (summed in a fixed entry order: service compute, queues, starts) exceeds its right-hand
    side; a node is hard when one of its rows binds or it can both serve and start.
    Returns ``(binding (rows,), hard (N,))``."""
    n_nodes = avail.shape[0]
    queue_row0 = n_nodes + link_capacity.shape[0]
    n_rows_all = queue_row0 + queue.shape[0]
    reach = np.zeros(n_rows_all)
    has_serve = np.zeros(n_nodes, dtype=np.bool_)
    has_start = np.zeros(n_nodes, dtype=np.bool_)
    for k in range(serve.shape[0]):
        a = serve[k]
        reach[action_node[a]] += work[a] * serve_upper[k]
        has_serve[action_node[a]] = True
    for k in range(serve.shape[0]):
        reach[queue_row0 + action_pair[serve[k]]] += serve_upper[k]
    for q in range(starts.shape[0]):
        reach[queue_row0 + action_pair[starts[q]]] += 1.0
        has_start[action_node[starts[q]]] = True
    hard = np.zeros(n_nodes, dtype=np.bool_)
    binding = np.zeros(n_rows_all, dtype=np.bool_)
    for r in range(n_rows_all):
        if r < n_nodes:
            if has_start[r] and has_serve[r]:
                reach[r] += avail[r]
            rhs, node = avail[r], r
        elif r < queue_row0:
            rhs, node = float(link_capacity[r - n_nodes]), link_src[r - n_nodes]
        else:
            rhs, node = float(queue[r - queue_row0]), pair_node[r - queue_row0]
        if reach[r] > rhs + _EPS:
            binding[r] = True
            hard[node] = True
    for i in range(n_nodes):
        if has_start[i] and has_serve[i]:
            hard[i] = True
    return binding, hard


@jit.part
def _closed_form(serve, serve_upper, starts, hard, gain, work, action_node):  # pragma: no cover
    """The easy nodes in closed form: every variable at its bound; the best start by gain
    per work, the later of equal ones. Returns ``(service (A,), start (N,))``."""
    service = np.zeros(gain.shape[0], dtype=np.int64)
    start = np.full(hard.shape[0], -1, dtype=np.int64)
    best_rate = np.full(hard.shape[0], -np.inf)
    for k in range(serve.shape[0]):
        if not hard[action_node[serve[k]]]:
            service[serve[k]] = np.int64(serve_upper[k])
    for q in range(starts.shape[0]):
        a = starts[q]
        i = action_node[a]
        rate = gain[a] / work[a]
        if not hard[i] and rate >= best_rate[i]:
            best_rate[i] = rate
            start[i] = a
    return service, start


@jit.part
def _hard_rows(
    binding, hard, starts, action_node, pair_node, link_src, queue_row0
):  # pragma: no cover
    """The hard program's rows: the hard nodes' binding rows renumbered in order, then one
    coupling row per start at a hard node, then one ``sum x_a <= 1`` row per node with such
    starts. Returns ``(renumber, binding rows kept, rows in all, the positions in
    ``starts`` of the hard nodes' starts, starts per node, each node's one-start row)``."""
    n_nodes = hard.shape[0]
    renumber = np.full(binding.shape[0], -1, dtype=np.int64)
    n_used = 0
    for r in range(binding.shape[0]):
        if binding[r]:
            if r < n_nodes:
                node = r
            elif r < queue_row0:
                node = link_src[r - n_nodes]
            else:
                node = pair_node[r - queue_row0]
            if hard[node]:
                renumber[r] = n_used
                n_used += 1
    hard_start = np.empty(starts.shape[0], dtype=np.int64)
    m = 0
    per_node = np.zeros(n_nodes, dtype=np.int64)
    for q in range(starts.shape[0]):
        i = action_node[starts[q]]
        if hard[i]:
            hard_start[m] = q
            m += 1
            per_node[i] += 1
    one_start_row = np.full(n_nodes, -1, dtype=np.int64)
    n_one = 0
    for i in range(n_nodes):
        if per_node[i] > 0:
            one_start_row[i] = n_used + m + n_one
            n_one += 1
    return renumber, n_used, n_used + m + n_one, hard_start[:m], per_node, one_start_row


@jit.part
def _hard_columns(
    serve,
    serve_upper,
    hard_starts,
    hard,
    renumber,
    n_used,
    per_node,
    one_start_row,
    gain,
    work,
    avail,
    action_node,
    action_pair,
    queue_row0,
):  # pragma: no cover - compiled
    """The hard program's columns, in three blocks: the hard nodes' service, then a start
    binary and then its compute per start at a hard node (``hard_starts``), with their
    entries in compressed columns. Returns ``(kind, action, cost, upper, integral, indptr,
    indices, data)``."""
    m = hard_starts.shape[0]
    n_serve_kept = 0
    for k in range(serve.shape[0]):
        if hard[action_node[serve[k]]]:
            n_serve_kept += 1
    n_kept = n_serve_kept + 2 * m
    kind = np.empty(n_kept, dtype=np.int64)
    action = np.empty(n_kept, dtype=np.int64)
    cost = np.empty(n_kept)
    upper = np.empty(n_kept)
    integral = np.empty(n_kept)
    indptr = np.zeros(n_kept + 1, dtype=np.int32)
    indices = np.empty(3 * n_kept, dtype=np.int32)
    data = np.empty(3 * n_kept)
    nnz = 0
    col = 0
    for k in range(serve.shape[0]):
        a = serve[k]
        i = action_node[a]
        if not hard[i]:
            continue
        kind[col], action[col] = SERVE, a
        cost[col], upper[col], integral[col] = -gain[a], serve_upper[k], 1.0
        if renumber[i] >= 0:
            indices[nnz], data[nnz] = renumber[i], work[a]
            nnz += 1
        row = renumber[queue_row0 + action_pair[a]]
        if row >= 0:
            indices[nnz], data[nnz] = row, 1.0
            nnz += 1
        col += 1
        indptr[col] = nnz
    for j in range(m):
        a = hard_starts[j]
        i = action_node[a]
        kind[col], action[col] = BINARY, a
        cost[col], upper[col], integral[col] = -0.0, 1.0, 1.0
        row = renumber[queue_row0 + action_pair[a]]
        if row >= 0:
            indices[nnz], data[nnz] = row, 1.0
            nnz += 1
        indices[nnz], data[nnz] = n_used + j, -avail[i]
        nnz += 1
        if per_node[i] > 1:
            indices[nnz], data[nnz] = one_start_row[i], 1.0
            nnz += 1
        col += 1
        indptr[col] = nnz
    for j in range(m):
        a = hard_starts[j]
        i = action_node[a]
        kind[col], action[col] = COMPUTE, a
        cost[col], upper[col], integral[col] = -(gain[a] / work[a]), avail[i], 0.0
        if renumber[i] >= 0:
            indices[nnz], data[nnz] = renumber[i], 1.0
            nnz += 1
        indices[nnz], data[nnz] = n_used + j, 1.0
        nnz += 1
        col += 1
        indptr[col] = nnz
    return kind, action, cost, upper, integral, indptr, indices[:nnz].copy(), data[:nnz].copy()


@_compiled
def integral_fix(x, relaxed, kind, indptr, indices, data, bound):  # pragma: no cover
    """In the kept columns: ``x`` gets the LP solution with
    each start's binary opened where its compute flows; True when that is integral and
    feasible (then it is MILP-optimal)."""
    n = kind.shape[0]
    m = 0  # the binaries, then the computes, close the columns
    for c in range(n):
        x[c] = relaxed[c]
        if kind[c] == BINARY:
            m += 1
    first_binary = n - 2 * m
    for j in range(m):
        b, c = first_binary + j, first_binary + m + j
        compute = x[c]
        x[b] = 1.0 if compute > _EPS else 0.0
        x[c] = compute if compute > _EPS else 0.0
    worst = 0.0
    for c in range(n):
        if kind[c] != COMPUTE:
            worst = max(worst, abs(x[c] - np.rint(x[c])))
    if worst > 1e-7:
        return False
    for c in range(n):
        if kind[c] != COMPUTE:
            x[c] = np.rint(x[c])
    # A @ x, column by column.
    rows = bound.shape[0]
    total = np.zeros(rows)
    for c in range(n):
        for e in range(indptr[c], indptr[c + 1]):
            total[indices[e]] += data[e] * x[c]
    for r in range(rows):  # noqa: SIM110 - numba compiles loops, not generators
        if not total[r] <= bound[r] + 1e-7:
            return False
    return True


@_compiled
def read_solution(x, kind, action, work, avail, action_node, service, start):  # pragma: no cover
    """The hard nodes' service and starts from ``x`` written
    into the closed-form ``service`` and ``start`` (in place)."""
    n = kind.shape[0]
    m = 0
    for c in range(n):
        if kind[c] == SERVE:
            service[action[c]] = np.int64(np.rint(x[c]))
        elif kind[c] == BINARY:
            m += 1
    if m == 0:
        return
    spent = np.zeros(avail.shape[0])
    for a in range(service.shape[0]):
        spent[action_node[a]] += service[a] * work[a]
    first_binary = n - 2 * m
    for j in range(m):
        b, c = first_binary + j, first_binary + m + j
        if np.rint(x[b]) >= 1 and x[c] > _EPS:
            a = action[b]
            i = action_node[a]
            if start[i] < 0 and avail[i] - spent[i] > _EPS:
                start[i] = a


@_compiled
def leftover_routes(
    queue_len,
    service,
    start,
    action_pair,
    route_weight,
    route_src_pair,
    route_link,
    route_capacity,
    link_capacity,
):  # pragma: no cover - compiled
    """The routing program of what service and starts leave (for ``OracleSur._route_leftover``
    up to the solve): the routes worth routing, their bounds, whether every one can take
    its bound (no queue or link row binds) and the rows' right-hand sides (queues, then
    links). Integer arithmetic throughout."""
    n_pairs = queue_len.shape[0]
    n_links = link_capacity.shape[0]
    left = queue_len.copy()
    for a in range(service.shape[0]):
        left[action_pair[a]] -= service[a]
    for i in range(start.shape[0]):
        if start[i] >= 0:
            left[action_pair[start[i]]] -= 1
    n_routes = route_weight.shape[0]
    routes = np.empty(n_routes, dtype=np.int64)
    upper = np.empty(n_routes, dtype=np.int64)
    n = 0
    pair_load = np.zeros(n_pairs, dtype=np.int64)
    link_load = np.zeros(n_links, dtype=np.int64)
    for r in range(n_routes):
        p = route_src_pair[r]
        if route_weight[r] > 0 and left[p] > 0 and route_capacity[r] > 0:
            routes[n] = r
            upper[n] = min(left[p], route_capacity[r])
            pair_load[p] += upper[n]
            link_load[route_link[r]] += upper[n]
            n += 1
    free = True
    for p in range(n_pairs):
        if pair_load[p] > left[p]:
            free = False
    for e in range(n_links):
        if link_load[e] > link_capacity[e]:
            free = False
    bound = np.empty(n_pairs + n_links)
    for p in range(n_pairs):
        bound[p] = float(max(left[p], 0))
    for e in range(n_links):
        bound[n_pairs + e] = float(link_capacity[e])
    return routes[:n].copy(), upper[:n].copy(), free, bound
