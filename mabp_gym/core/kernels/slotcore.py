"""The projection (SPEC 3.2) and the observation encoding, as kernels over flat arrays.

:mod:`mabp_gym.core.projection` states the projection's rule and calls
:class:`CompiledProjection`; :class:`mabp_gym.core.encoding.ObservationEncoder` calls
:func:`encode_compiled`. Both are compiled by numba where it is there and run as plain
Python otherwise (:mod:`mabp_gym.core.kernels.jit`).

Why compile: a profile of ``mixed`` at 0.85 spends a quarter of a slot in the projection's
per-candidate Python loops; compiled, they take a few microseconds (see
``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.rules import EPS as _EPS
from mabp_gym.core.kernels.rules import backlog_pairs, hit_bits, in_service_spend
from mabp_gym.core.kernels.transition_core import (
    CompiledTransition,
    FloatField,
    IntField,
    _field,
    _hits_after,
    state_arrays,
)

if TYPE_CHECKING:
    from mabp_gym.core.workload import Workload


_RADIX_FROM = 512
"""From this many live candidates on, :func:`_descending` orders them by radix (linear in
their number) instead of merging (``n log n``: the one part of a slot that grew faster
than the network)."""


def radix_sort(ix) -> bool | None:
    """The projection's ``radix`` argument for the workload index ``ix``: ``True`` where one
    sort can see :data:`_RADIX_FROM` candidates or more (the transfers, all together; the
    service or routing candidates of one node), else ``None``, with which the compiled
    projection leaves the radix sort out (numba prunes a branch on an argument that is
    ``None``): a network that can never use it does not pay its compilation, about 0.5 s of
    a cold start. The order is the same either way."""
    at_a_node = (
        int(np.bincount(node, minlength=ix.num_nodes).max(initial=0))
        for node in (ix.action_node, ix.pair_node[ix.route_src_pair])
    )
    most = max(ix.num_transfers, *at_a_node)
    return True if most >= _RADIX_FROM else None


def _descending_radix(values, spare_values, order, spare, counts):  # pragma: no cover
    """``order`` (positions in ascending index order, ``values`` theirs) sorted by
    descending value, ties in index order, by a stable least-significant-byte radix sort
    of the values' bits: every live value is positive and finite, and for those the IEEE
    bits order as the values do, so their complement orders them descending. A byte that
    every key shares costs one counting pass and no scatter. ``spare_values``, ``spare``
    (as long as ``order``) and ``counts`` (256) are scratch; ``values`` is overwritten.
    Returns whether the sorted positions ended in ``spare`` (else in ``order``)."""
    n = order.shape[0]
    keys = values.view(np.uint64)
    for k in range(n):
        keys[k] = ~keys[k]
    spare_keys = spare_values.view(np.uint64)
    swapped = False
    for byte in range(8):
        shift = np.uint64(8 * byte)
        for d in range(256):
            counts[d] = 0
        shared = True
        for k in range(n):
            d = (keys[k] >> shift) & np.uint64(255)
            counts[d] += 1
            shared = shared and counts[d] == k + 1
        if shared:
            continue
        total = 0
        for d in range(256):
            total, counts[d] = total + counts[d], total
        for k in range(n):
            d = (keys[k] >> shift) & np.uint64(255)
            spare_keys[counts[d]] = keys[k]
            spare[counts[d]] = order[k]
            counts[d] += 1
        keys, spare_keys = spare_keys, keys
        order, spare = spare, order
        swapped = not swapped
    return swapped


_RANK_UP_TO = 64
"""Up to this many candidates, :func:`_order_descending` places each one at its rank, the
count of those that go before it: every comparison made, but none of them a branch, where
an insertion sort or a merge of scores of random sign mispredicts about every other step.
On an AVX-512 host: the same time as insertion at 8 to 12 candidates, 0.6-0.7x a merge's
from 24 to 64, and slower past about 150, where a host with narrower vectors gets there
sooner (``benchmarks/RESULTS.md``). The service and routing stages sort each node's few on
its own."""


def _order_descending(key, order, n, radix, counts):  # pragma: no cover
    """``key[:n]`` and their positions ``order[:n]`` (in ascending position order) sorted
    by descending key, ties in position order: each at its rank up to :data:`_RANK_UP_TO`
    of them, else as runs of 8 sorted by insertion and merged bottom up, or by radix from
    :data:`_RADIX_FROM` of them where ``radix`` is not ``None`` (:func:`radix_sort`).
    ``key`` and ``order`` are at least ``2 n`` long (the ranks' and the merge's second
    half); ``counts`` (int64, 256) is scratch. Returns where the sorted positions start:
    ``order[start : start + n]`` (a kernel without reference counts may return no view).
    The merge moves the values with their positions (comparing ``block[order[i]]`` put two
    dependent loads on every step's critical path: 3x the time at 184 candidates), between
    the two halves of one array of each, the caller's: an allocation costs about as much as
    a merge pass of a few dozen."""
    if radix is not None:  # noqa: SIM102 (numba prunes only this plain test on an argument)
        if n >= _RADIX_FROM:
            swapped = _descending_radix(key[:n], key[n : 2 * n], order[:n], order[n:], counts)
            return n if swapped else 0
    if n <= _RANK_UP_TO:
        for y in range(n):
            value = key[y]
            rank = 0  # the larger ones, and the equal ones before it
            for z in range(y):
                rank += key[z] >= value
            for z in range(y + 1, n):
                rank += key[z] > value
            key[n + rank] = value
            order[n + rank] = order[y]
        return n
    width = 8
    for lo in range(0, n, width):
        hi = lo + width if lo + width < n else n
        for y in range(lo + 1, hi):
            value, position = key[y], order[y]
            z = y - 1
            while z >= lo and value > key[z]:  # only a strictly larger one passes
                key[z + 1] = key[z]
                order[z + 1] = order[z]
                z -= 1
            key[z + 1] = value
            order[z + 1] = position
    src, dst = 0, n  # the merge's source and destination halves
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            i, j, k = src + lo, src + mid, dst + lo
            while i < src + mid and j < src + hi:
                if key[j] > key[i]:  # only a strictly larger one passes
                    key[k] = key[j]
                    order[k] = order[j]
                    j += 1
                else:
                    key[k] = key[i]
                    order[k] = order[i]
                    i += 1
                k += 1
            # Element by element: a slice assignment compiles a shape check with its
            # error message (1.5 s).
            for rest in range(i, src + mid):
                key[k] = key[rest]
                order[k] = order[rest]
                k += 1
            for rest in range(j, src + hi):
                key[k] = key[rest]
                order[k] = order[rest]
                k += 1
        src, dst = dst, src
        width *= 2
    return src


def _node_descending(block, members, pair, queue_len, sort):  # pragma: no cover
    """One node's candidates ``members`` (in index order) of positive ``block`` score whose
    queue ``pair[c]`` holds units, in descending score, ties in index order
    (:func:`_order_descending`; ``sort`` is its ``(key, order, counts, radix)``). Returns
    ``(start, count)``: they are ``order[start : start + count]``."""
    key, order, counts, radix = sort
    n = 0
    for c in members:
        # Written whatever the test, and kept by counting: with scores of random sign
        # a branch here is mispredicted about every other candidate.
        value = block[c]
        key[n] = value
        order[n] = c
        n += (value > 0) & (queue_len[pair[c]] > 0)
    return _order_descending(key, order, np.int64(n), radix, counts), n


def _descending(block, live, radix, key, order, counts):  # pragma: no cover
    """The positions where ``live`` holds, in descending ``block`` value, ties in index
    order: ``np.flatnonzero(live)`` ordered by ``np.argsort(-block[...], kind="mergesort")``
    (:func:`_order_descending`; ``key``, ``order`` and ``counts`` are its scratch, ``key``
    and ``order`` at least twice as long as ``live``). Returns ``(start, count)``: the
    sorted positions are ``order[start : start + count]``. numba's own stable argsort cost
    1.4 s of a cold start to compile and ``flatnonzero`` 0.2 s; this whole function a tenth
    of that."""
    n = 0
    for k in range(live.shape[0]):
        key[n] = block[k]
        order[n] = k
        n += live[k]
    return _order_descending(key, order, np.int64(n), radix, counts), n


@jit.part
def _project_transfers(
    block, holder, memory_used, ints, floats, out, radix, scratch
):  # pragma: no cover
    """The projection's step 1: the transfers of positive score in descending score (ties
    by index), each kept when its object is still at the source, the destination neither
    holds nor receives it, and the link's bandwidth and the destination's budget still
    take it. Writes the kept ones into ``out`` and returns their count."""
    flags, key, order_scratch, counts, live_scratch, used, _, bandwidth = scratch[:8]
    n_transfer = block.shape[0]
    live = live_scratch[:n_transfer]
    src_slot = _field(ints, IntField.TRANSFER_SRC_SLOT)
    dst_slot = _field(ints, IntField.TRANSFER_DST_SLOT)
    holder_flat = jit.flat(holder)
    # Only those whose source holds the object and whose destination does not: the
    # memory does not change while the transfers are chosen, so the rest would be passed
    # over anyway, and the sort is the shorter.
    for k in range(n_transfer):
        live[k] = (block[k] > 0) & (holder_flat[src_slot[k]] >= 0) & (holder_flat[dst_slot[k]] < 0)
    first, count = _descending(block, live, radix, key, order_scratch, counts)
    transfer_link = _field(ints, IntField.TRANSFER_LINK)
    transfer_signature = _field(ints, IntField.TRANSFER_SIGNATURE)
    link_src, link_dst = _field(ints, IntField.LINK_SRC), _field(ints, IntField.LINK_DST)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    budget = _field(floats, FloatField.BUDGET)
    for i in range(used.shape[0]):
        used[i] = memory_used[i]
    link_bandwidth = _field(floats, FloatField.LINK_BANDWIDTH)
    for e in range(bandwidth.shape[0]):
        bandwidth[e] = link_bandwidth[e]
    n_exec = 0
    for x in range(first, first + count):
        k = order_scratch[x]
        e = transfer_link[k]
        s = transfer_signature[k]
        i = link_src[e]
        j = link_dst[e]
        size = signature_size[s]
        src = src_slot[k]
        dst = dst_slot[k]
        if (  # the source holds it and the destination does not: only those are live
            flags[src] != 0
            or flags[dst] & 2
            or bandwidth[e] < size - _EPS
            or used[j] + size > budget[j] + _EPS
        ):
            continue
        flags[src] |= 1
        flags[dst] |= 2
        used[i] -= size
        used[j] += size
        bandwidth[e] -= size
        out[n_exec] = k
        n_exec += 1
    return n_exec


@jit.part
def _project_routes(block, queue_len, ints, avail, capacity, route, sort):  # pragma: no cover
    """The projection's step 3: the routes of positive score from queues holding units, in
    descending score (ties by index), node by node (a route takes only its source node's
    queues and outgoing link), each moving what is left of its queue (``avail``, after
    service) up to its link's capacity left. Writes ``route``; ``capacity`` is scratch."""
    route_src_pair = _field(ints, IntField.ROUTE_SRC_PAIR)
    route_link = _field(ints, IntField.ROUTE_LINK)
    node_routes = _field(ints, IntField.NODE_ROUTES)
    node_route_ptr = _field(ints, IntField.NODE_ROUTE_PTR)
    link_capacity = _field(ints, IntField.LINK_CAPACITY)
    order = sort[1]
    for e in range(capacity.shape[0]):
        capacity[e] = link_capacity[e]
    for i in range(node_route_ptr.shape[0] - 1):
        lo, hi = node_route_ptr[i], node_route_ptr[i + 1]
        first, n = _node_descending(block, node_routes[lo:hi], route_src_pair, queue_len, sort)
        for x in range(first, first + n):
            r = order[x]
            p = route_src_pair[r]
            e = route_link[r]
            units = avail[p] if avail[p] < capacity[e] else capacity[e]
            if units > 0:
                route[r] = units
                avail[p] -= units
                capacity[e] -= units


def _project_kernel(scores, memory, state, ints, floats, scratch, out, radix):  # pragma: no cover
    """The projection of :func:`mabp_gym.core.projection.project` over flat arrays.

    ``state`` holds the arrays of
    :data:`~mabp_gym.core.kernels.transition_core.STATE_FIELDS`, ``ints`` and ``floats``
    the workload's static arrays (the transition's packs), ``out`` is ``(transfers_out,
    hit, route, service, start)``. Writes the executed transfers into ``transfers_out``
    (returns their count), the hit bits of the post-transfer memory into ``hit`` and the
    control into ``route``, ``service`` and ``start`` (which arrive zeroed, ``start`` at
    -1). ``scratch`` is :func:`projection_scratch`'s: the kernel allocates nothing, so it
    runs without numba's reference counts (:func:`~mabp_gym.core.kernels.jit.leaf`); its
    first array, ``(N * S,)`` int8 flags, arrives and leaves all zero (bit 1: the object at
    the position moved out this slot; bit 2: one arrived). ``radix``: :func:`radix_sort`
    of the workload.
    """
    flags, key, order, counts, _, _, left, _, avail, capacity, after = scratch
    sort = (key, order, counts, radix)  # the node-by-node sorts' scratch
    holder, memory_used, service_action, service_residual = state[0], state[2], state[3], state[4]
    queue_len = state[7]
    transfers_out, hit, route, service, start = out
    n_act, n_route, n_transfer = service.shape[0], route.shape[0], transfers_out.shape[0]
    n_sig = holder.shape[1]
    n_exec = 0
    # 1. Transfers in descending score, ties by index.
    if memory and n_transfer > 0:
        offset = n_act + n_route
        block = scores[offset : offset + n_transfer]
        n_exec = _project_transfers(
            block, holder, memory_used, ints, floats, transfers_out, radix, scratch
        )
    # Hit bits of the post-transfer memory.
    if memory and n_sig > 0:
        src_slot = _field(ints, IntField.TRANSFER_SRC_SLOT)
        dst_slot = _field(ints, IntField.TRANSFER_DST_SLOT)
        for q in range(n_exec):
            flags[src_slot[transfers_out[q]]] = 0
            flags[dst_slot[transfers_out[q]]] = 0
        _hits_after(transfers_out[:n_exec], ints, holder, hit, after)

    # 2. Units in service take their compute first; then service in descending score.
    mu, work = _field(floats, FloatField.MU), _field(floats, FloatField.WORK)  # work[h * A + a]
    action_pair = _field(ints, IntField.ACTION_PAIR)
    in_service_spend(mu, service_action, service_residual, left)
    for i in range(mu.shape[0]):
        left[i] = mu[i] - left[i]
    for p in range(avail.shape[0]):
        avail[p] = queue_len[p]
    # Node by node: a node's candidates take only its compute and its own queues, so their
    # order among themselves is the global one's, and each sort is a few.
    node_actions = _field(ints, IntField.NODE_ACTIONS)
    node_action_ptr = _field(ints, IntField.NODE_ACTION_PTR)
    block = scores[:n_act]
    for i in range(mu.shape[0]):
        if left[i] <= _EPS:
            continue
        lo, hi = node_action_ptr[i], node_action_ptr[i + 1]
        first, n = _node_descending(block, node_actions[lo:hi], action_pair, queue_len, sort)
        for x in range(first, first + n):
            if left[i] <= _EPS:
                break
            a = order[x]
            p = action_pair[a]
            q = avail[p]
            if q == 0:
                continue
            w = work[hit[a] * n_act + a]
            if w > mu[i] + _EPS:
                # The unit can never fit whole: it starts with all the compute left.
                start[i] = a
                q -= 1
                left[i] = 0.0
            else:
                whole = (left[i] + _EPS) // w if w > 0 else q  # the whole units that fit
                n_units = q if whole >= q else np.int64(whole)
                if n_units >= 1:
                    service[a] = n_units
                    q -= n_units
                    left[i] -= n_units * w
            avail[p] = q

    # 3. Routing in descending score with what is left of each queue.
    if n_route > 0:
        block = scores[n_act : n_act + n_route]
        _project_routes(block, queue_len, ints, avail, capacity, route, sort)
    return n_exec


_descending_radix = jit.part(_descending_radix)
_order_descending = jit.leaf(_order_descending)
_descending = jit.leaf(_descending)
_node_descending = jit.part(_node_descending)
_project_compiled = jit.leaf(_project_kernel)


def projection_scratch(ix) -> tuple[np.ndarray, ...]:
    """The projection kernel's ``scratch`` for the workload index ``ix``: the flags
    (zero), the sort's values, positions and counts, the live candidates, then per node
    the memory used and the compute left, per link the bandwidth left, per pair the units
    left, per link the capacity left, and the memory after the transfers ``(N, S)``."""
    n, links = ix.num_nodes, ix.num_links
    most = max(ix.num_actions, ix.num_routes, ix.num_transfers, 1)
    return (
        np.zeros(n * ix.num_signatures, dtype=np.int8),
        np.empty(2 * most),
        np.empty(2 * most, dtype=np.int64),
        np.empty(256, dtype=np.int64),
        np.empty(most, dtype=np.bool_),
        np.empty(n),
        np.empty(n),
        np.empty(links),
        np.empty(ix.num_pairs, dtype=np.int64),
        np.empty(links, dtype=np.int64),
        np.empty((n, ix.num_signatures), dtype=np.int64),
    )


class CompiledProjection:
    """The static arrays of one workload, laid out for the compiled projection."""

    def __init__(self, workload: Workload) -> None:
        ix = workload.index
        self.workload = workload
        self.scratch = projection_scratch(ix)
        self.core = CompiledTransition.shared(workload)  # the static arrays, packed
        self.radix = radix_sort(ix)

    def __call__(
        self, state, scores: np.ndarray, memory: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(transfers, hit, route, service, start)`` of the projection of ``scores``."""
        ix = self.workload.index
        transfers = np.empty(ix.num_transfers, dtype=np.int64)
        hit = np.zeros(ix.num_actions, dtype=np.int64)
        route = np.zeros(ix.num_routes, dtype=np.int64)
        service = np.zeros(ix.num_actions, dtype=np.int64)
        start = np.full(ix.num_nodes, -1, dtype=np.int64)
        count = _project_compiled(
            scores,
            memory,
            state_arrays(state),
            self.core.ints,
            self.core.floats,
            self.scratch,
            (transfers, hit, route, service, start),
            self.radix,
        )
        return transfers[:count], hit, route, service, start


@jit.part
def _encode_memory(
    holder, memory_used, queue_flat, ints, floats, retain_positions, transfer, retain, mask, fill
):  # pragma: no cover
    """The transfer and retention features and the transfers' action mask: a transfer is
    feasible alone when its source holds the object, its destination does not, and its
    size (as the float32 feature) fits the link's bandwidth and the destination's free
    memory."""
    n_nodes, n_sig = holder.shape
    holder_flat = jit.flat(holder)
    src_slot = _field(ints, IntField.TRANSFER_SRC_SLOT)
    dst_slot = _field(ints, IntField.TRANSFER_DST_SLOT)
    transfer_link = _field(ints, IntField.TRANSFER_LINK)
    transfer_signature = _field(ints, IntField.TRANSFER_SIGNATURE)
    link_dst = _field(ints, IntField.LINK_DST)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    link_bandwidth = _field(floats, FloatField.LINK_BANDWIDTH)
    offset = mask.shape[0] - transfer.shape[0]  # the transfers' scores come last but one
    offset -= retain.shape[0]
    budget = _field(floats, FloatField.BUDGET)
    for k in range(transfer.shape[0]):
        src_holds = holder_flat[src_slot[k]] >= 0
        dst = link_dst[transfer_link[k]]
        free = budget[dst] - memory_used[dst]
        size = np.float32(signature_size[transfer_signature[k]])
        transfer[k, 0] = 1.0 if src_holds else 0.0
        if fill:
            transfer[k, 1] = size
        transfer[k, 2] = free
        mask[offset + k] = (
            src_holds
            & (holder_flat[dst_slot[k]] < 0)
            & (np.float64(size) <= link_bandwidth[transfer_link[k]])
            & (np.float64(size) <= free + 1e-9)
        )
    retain_node = _field(ints, IntField.RETAIN_NODE)
    retain_signature = _field(ints, IntField.RETAIN_SIGNATURE)
    for k in range(retain.shape[0]):
        retain[k, 0] = 1.0 if holder[retain_node[k], retain_signature[k]] >= 0 else 0.0
        if fill:
            retain[k, 1] = signature_size[retain_signature[k]]
        demand = np.float32(0.0)
        for w in range(retain_positions.shape[1]):
            demand += queue_flat[retain_positions[k, w]]
        retain[k, 2] = demand


@jit.part
def _encode_routes(pairs, hit, ints, floats, compat, route, fill):  # pragma: no cover
    """The route features from the backlog per pair ``pairs`` and the hit bits ``hit``;
    the link cost (static) only with ``fill``. ``compat`` is the encoder's ``(first,
    more)``: per route, the first action at its destination whose hit makes it
    memory-compatible (-1: none), and the others as ``(route, action)`` rows."""
    first, more = compat
    route_src_pair = _field(ints, IntField.ROUTE_SRC_PAIR)
    route_dst_pair = _field(ints, IntField.ROUTE_DST_PAIR)
    route_link, link_cost = _field(ints, IntField.ROUTE_LINK), _field(floats, FloatField.LINK_COST)
    for r in range(route.shape[0]):
        src_q = pairs[route_src_pair[r]]
        route[r, 0] = src_q - pairs[route_dst_pair[r]]
        if fill:
            route[r, 1] = link_cost[route_link[r]]
        a = first[r]
        compatible = hit[a] if a >= 0 else 0
        route[r, 2] = 1.0 if compatible else 0.0
        route[r, 3] = src_q
    for k in range(more.shape[0]):
        if hit[more[k, 1]]:
            route[more[k, 0], 2] = 1.0


def _encode_kernel(memory, state, ints, floats, statics, out, fill):  # pragma: no cover
    """The observation of :class:`mabp_gym.core.encoding.ObservationEncoder` over flat arrays.

    ``state``, ``ints`` and ``floats`` as for the projection; ``statics`` is the encoder's
    ``(compat_first, compat_more, retain_positions, static_nodes, successor_probs,
    successor_positions)``: :func:`_encode_routes`'s pair, the queue entries each retention
    candidate serves, the static node features, per (hit, action) the successor law over
    queue entries. ``out`` is
    ``(queue_flat, hit, nodes, queues, resident, service, route, transfer, retain, mask,
    pairs)``, ``pairs`` an int64 scratch of one entry per pair.
    Fills every output, the static columns (nodes' static features, link costs, sizes,
    the retention mask) only with ``fill`` (else the arrays hold them: the vector env's
    buffers from the reset), the successor-pressure column ``service[:, 3]`` (a float32
    sum whose order numpy fixes) only where a law has fewer than 8 terms, which numpy adds
    one by one from zero: else the caller computes it with numpy from ``queue_flat`` and
    ``hit``. Sums of queue counts are exact in float32 in any order while they stay below
    2**24 units (past that the float32 observation rounds them, alike in every path; the
    rewards are computed in float64 from the integer state).
    """
    holder, memory_used, service_action, service_residual = state[0], state[2], state[3], state[4]
    queue_len = state[7]
    compat_first, compat_more, retain_positions, static_nodes, probs, positions = statics
    queue_flat, hit, nodes, queues, resident, service, route, transfer, retain, mask, pairs = out
    n_nodes, n_comm = queues.shape
    n_act, n_route, n_sig = service.shape[0], route.shape[0], resident.shape[1]
    pair_node = _field(ints, IntField.PAIR_NODE)
    pair_commodity = _field(ints, IntField.PAIR_COMMODITY)
    action_pair = _field(ints, IntField.ACTION_PAIR)
    action_node = _field(ints, IntField.ACTION_NODE)
    route_src_pair = _field(ints, IntField.ROUTE_SRC_PAIR)
    work = _field(floats, FloatField.WORK)
    penalty = _field(floats, FloatField.PENALTY)  # [h * A + a]
    mu = _field(floats, FloatField.MU)
    backlog_pairs(queue_len, service_action, action_pair, pairs)
    for p in range(pairs.shape[0]):
        value = np.float32(pairs[p])
        queues[pair_node[p], pair_commodity[p]] = value
        queue_flat[pair_node[p] * n_comm + pair_commodity[p]] = value
    held, flags = jit.flat(holder), jit.flat(resident)
    for k in range(held.shape[0]):  # one flat pass, vectorized
        flags[k] = np.float32(held[k] >= 0)
    if memory and n_sig > 0:
        hit_bits(holder, _field(ints, IntField.HIT_SLOT), hit)
    else:
        hit[:] = 0
    for a in range(n_act):
        h = hit[a]
        service[a, 0] = work[h * n_act + a]
        service[a, 1] = penalty[h * n_act + a]
        service[a, 2] = h
        service[a, 4] = pairs[action_pair[a]]
    _encode_routes(pairs, hit, ints, floats, (compat_first, compat_more), route, fill)
    _encode_memory(
        holder,
        memory_used,
        queue_flat,
        ints,
        floats,
        retain_positions,
        transfer,
        retain,
        mask,
        fill,
    )
    width = static_nodes.shape[1]
    node_pair_ptr = _field(ints, IntField.NODE_PAIR_PTR)
    for i in range(n_nodes):
        busy = service_action[i] >= 0
        if fill:
            for f in range(width):
                nodes[i, f] = static_nodes[i, f]
        nodes[i, width] = memory_used[i]
        # The row's sum over its pairs alone (commodity order): the rest are zeros.
        total = np.float32(0.0)
        for p in range(node_pair_ptr[i], node_pair_ptr[i + 1]):
            total += queues[i, pair_commodity[p]]
        nodes[i, width + 1] = total
        nodes[i, width + 2] = 1.0 if busy else 0.0
        nodes[i, width + 3] = service_residual[i] if busy else 0.0
    for a in range(n_act):
        i = action_node[a]
        residual = service_residual[i] if service_action[i] >= 0 else 0.0
        mask[a] = (queue_len[action_pair[a]] > 0) & (
            (mu[i] - (residual if residual < mu[i] else mu[i])) > 1e-9
        )
    for r in range(n_route):
        mask[n_act + r] = queue_len[route_src_pair[r]] > 0
    if fill:
        for k in range(mask.shape[0] - retain.shape[0], mask.shape[0]):
            mask[k] = 1
    if positions.shape[1] < 8:
        for a in range(n_act):
            pressure = np.float32(0.0)
            for w in range(positions.shape[1]):
                pressure += probs[hit[a], a, w] * queue_flat[positions[a, w]]
            service[a, 3] = pressure


encode_compiled = jit.leaf(_encode_kernel)
