"""One slot's transition (SPEC 1 steps 2-9) as two kernels over flat arrays, run by
:class:`mabp_gym.core.simulator.Simulator`: :func:`_serve_kernel` (transfers, service,
routes) and :func:`_outcome_kernel` (outcomes, retention, arrivals). Compiled by numba where
it is there, plain Python otherwise (:mod:`mabp_gym.core.kernels.jit`).

Queues are counted, not listed: a pair's waiting units are runs ``(birth slot, units)``,
several to a row of one pool, the rows linked (:class:`RunFifo`), so a slot costs the runs
it touches, not the units. The draws come from the simulator's own
``numpy.random.Generator`` in a fixed order (the successor uniforms of the units
served, the generation draws, the Poisson total of arrivals, their uniforms): numpy makes
them between the two kernels, except where an action generates with a probability strictly
between 0 and 1; there the second kernel draws from the generator itself (numba draws
exactly as numpy does, but passing a generator costs several microseconds a call).
"""

from __future__ import annotations

import copy
import weakref
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.rules import EPS as _EPS
from mabp_gym.core.kernels.rules import hit_bits, in_service_spend, move_objects

if TYPE_CHECKING:
    from mabp_gym.core.index import WorkloadIndex
    from mabp_gym.core.workload import Workload

_compiled = jit.kernel
# A pool row holds up to RUN_SLOTS runs of one pair, in order: a header (the pair's next
# row, the first live run, one past the last run) and the runs' (birth, units) pairs. A
# queue's runs are then side by side (a take or a push reads one row for several runs;
# one row a run made every take wait for a row that had left the cache, with many envs).
RUN_SLOTS = 6
_NEXT, _LO, _HI = 0, 1, 2  # the header's columns
_RUNS = 4  # run j's birth is column _RUNS + 2 * j, its units the next one
ROW_WIDTH = _RUNS + 2 * RUN_SLOTS  # 16 int64: two cache lines


# -- runs of equal birth slots, RUN_SLOTS to a row of one pool -----------------------------
@jit.leaf
def _push(pool, head, tail, meta, p, birth, count):  # pragma: no cover - compiled
    """Append ``count`` units born in ``birth`` to pair ``p``; the pool must have a free
    row (:meth:`RunFifo.reserve`). Units are anonymous but for their birth slot, so a tail
    run of the same birth absorbs them; a new run goes into the tail row while it has room."""
    last = tail[p]
    if last >= 0:
        hi = pool[last, _HI]
        column = _RUNS + 2 * hi
        if pool[last, column - 2] == birth:
            pool[last, column - 1] += count
            return
        if hi < RUN_SLOTS:
            pool[last, column] = birth
            pool[last, column + 1] = count
            pool[last, _HI] = hi + 1
            return
    k = meta[0]
    meta[0] = pool[k, _NEXT]
    meta[1] -= 1
    pool[k, _NEXT] = -1
    pool[k, _LO] = 0
    pool[k, _HI] = 1
    pool[k, _RUNS] = birth
    pool[k, _RUNS + 1] = count
    if last >= 0:
        pool[last, _NEXT] = k
    else:
        head[p] = k
    tail[p] = k


@jit.leaf
def _take(pool, head, tail, meta, p, wanted):  # pragma: no cover - compiled
    """Remove up to ``wanted`` units from the head run of pair ``p`` (it must have one).
    Returns ``(birth, units taken)``; a row emptied goes back to the free list."""
    k = head[p]
    lo = pool[k, _LO]
    column = _RUNS + 2 * lo
    birth = pool[k, column]
    count = pool[k, column + 1]
    taken = wanted if wanted < count else count
    if taken < count:
        pool[k, column + 1] = count - taken
    elif lo + 1 < pool[k, _HI]:
        pool[k, _LO] = lo + 1
    else:
        following = pool[k, _NEXT]
        head[p] = following
        if following < 0:
            tail[p] = -1
        pool[k, _NEXT] = meta[0]
        meta[0] = k
        meta[1] += 1
    return birth, taken


@_compiled
def _one():  # pragma: no cover - compiled
    """1 typed as int64: numba compiles a callee once more for a literal ``1`` argument."""
    return np.int64(1)


@_compiled
def _lengths(pool, head, lengths):  # pragma: no cover - compiled
    """Units per pair, recounted from the runs."""
    for p in range(head.shape[0]):
        total = 0
        k = head[p]
        while k >= 0:
            for j in range(pool[k, _LO], pool[k, _HI]):
                total += pool[k, _RUNS + 2 * j + 1]
            k = pool[k, _NEXT]
        lengths[p] = total


# -- one slot, in two kernels around the draws ---------------------------------------------
# The static index arrays travel in two packs, each headed by the bounds of its fields
# (a kernel slices a field out as a view: fewer arguments to pass on every call).
class IntField(IntEnum):
    """Each field of the int pack by name, its value the field's number (numba reads
    the members as constants)."""

    LINK_SRC = 0
    LINK_DST = 1
    TRANSFER_LINK = 2
    TRANSFER_SIGNATURE = 3
    ACTION_PAIR = 4
    ACTION_NODE = 5
    ACTION_SIGNATURE = 6
    ROUTE_SRC_PAIR = 7
    ROUTE_DST_PAIR = 8
    ROUTE_LINK = 9
    PAIR_COMMODITY = 10
    RETAIN_NODE = 11
    RETAIN_SIGNATURE = 12
    RETAIN_OF = 13  # (N * S,) raveled
    HIT_SLOT = 14  # (A,) raveled position of each action's signature, N * S for none
    LINK_CAPACITY = 15
    ELIGIBLE = 16  # (N * S,) raveled, 0 or 1
    SUCCESSOR_PTR = 17  # (2A + 1,) the successor law of row h * A + a: its entries' bounds
    SUCCESSOR_PAIR = 18  # each entry's target pair
    ARRIVAL_PAIR = 19  # the pair of each arrival-mix bin
    RETAIN_PTR = 20  # (N + 1,) each node's retention candidates (sorted by node)
    TRANSFER_SRC_SLOT = 21  # (T,) raveled (source node, signature) of each transfer candidate
    TRANSFER_DST_SLOT = 22  # (T,) raveled (destination node, signature)
    PAIR_NODE = 23
    NODE_ACTIONS = 24  # (A,) the actions node by node, each node's in index order
    NODE_ACTION_PTR = 25  # (N + 1,) each node's bounds in NODE_ACTIONS
    NODE_ROUTES = 26  # (R,) the routes by source node, each node's in index order
    NODE_ROUTE_PTR = 27  # (N + 1,) each node's bounds in NODE_ROUTES
    NODE_PAIR_PTR = 28  # (N + 1,) each node's pairs (pairs are numbered node by node)


class FloatField(IntEnum):
    """Each field of the float pack by name, its value the field's number."""

    SIGNATURE_SIZE = 0
    MU = 1
    BUDGET = 2
    LINK_COST = 3
    GEN_PROB = 4
    LINK_BANDWIDTH = 5
    WORK = 6  # (2A,) raveled: work[h * A + a]
    PENALTY = 7  # (2A,) raveled
    SUCCESSOR_BOUND = 8  # each successor entry's cumulative probability
    ARRIVAL_CUM = 9  # the arrival mix's cumulative shares, the last one left out


class Scalar(IntEnum):
    """The scalars after each pack's bounds (see ``_pack``), by name: their positions."""

    REPLICAS = len(IntField) + 1  # in the int pack
    TOTAL_RATE = len(FloatField) + 1  # in the float pack
    MIGRATION_COST = len(FloatField) + 2  # in the float pack


INT_FIELDS = tuple(field.name.lower() for field in IntField)
FLOAT_FIELDS = tuple(field.name.lower() for field in FloatField)


_field = jit.pack_field
"""Field ``k`` of a pack, as a view (:data:`jit.pack_field`)."""


@jit.part
def _hits_after(transfers, ints, holder, hit, after):  # pragma: no cover
    """SPEC 1 steps 2-4 without changing ``holder``: the hit bits of the memory after the
    feasible ``transfers``, written into ``hit`` (``after``, shaped as ``holder``, is
    scratch)."""
    for i in range(holder.shape[0]):
        for s in range(holder.shape[1]):
            after[i, s] = holder[i, s]
    move_objects(
        transfers,
        _field(ints, IntField.TRANSFER_LINK),
        _field(ints, IntField.TRANSFER_SIGNATURE),
        _field(ints, IntField.LINK_SRC),
        _field(ints, IntField.LINK_DST),
        after,
    )
    hit_bits(after, _field(ints, IntField.HIT_SLOT), hit)


@jit.part
def _transfer(transfers, ints, floats, holder, owner, memory_used, hit):  # pragma: no cover
    """SPEC 1 steps 2-4: the feasible ``transfers`` move their objects and memory use, and
    ``hit`` takes the hit bits of the post-transfer memory (what the check found). Returns
    the transfers' migration cost."""
    link_src, link_dst = _field(ints, IntField.LINK_SRC), _field(ints, IntField.LINK_DST)
    transfer_link = _field(ints, IntField.TRANSFER_LINK)
    transfer_signature = _field(ints, IntField.TRANSFER_SIGNATURE)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    cost = 0.0
    for q in range(transfers.shape[0]):
        k = transfers[q]
        e = transfer_link[k]
        s = transfer_signature[k]
        owner[holder[link_src[e], s]] = link_dst[e]
        memory_used[link_src[e]] -= signature_size[s]
        memory_used[link_dst[e]] += signature_size[s]
        cost += floats[Scalar.MIGRATION_COST] * signature_size[s]
    move_objects(transfers, transfer_link, transfer_signature, link_src, link_dst, holder)
    hit_bits(holder, _field(ints, IntField.HIT_SLOT), hit)
    return cost


@jit.part
def _route_units(route, queue_len, fifo, ints, floats, listed):  # pragma: no cover
    """SPEC 1 step 5's routing: units leave their queue now and join the next hop's tail
    (they are served there from t + 1), in route order. Returns (units routed,
    transmission penalty). ``listed`` is scratch of one entry per route."""
    route_src_pair = _field(ints, IntField.ROUTE_SRC_PAIR)
    route_dst_pair = _field(ints, IntField.ROUTE_DST_PAIR)
    route_link, link_cost = _field(ints, IntField.ROUTE_LINK), _field(floats, FloatField.LINK_COST)
    pool, head, tail, meta = fifo
    routed = 0
    penalty = 0.0
    moving = 0
    for r in range(route.shape[0]):
        listed[moving] = r
        moving += route[r] != 0
    for x in range(moving):
        r = listed[x]
        n = route[r]
        p = route_src_pair[r]
        target = route_dst_pair[r]
        left = n
        while left > 0:
            birth, taken = _take(pool, head, tail, meta, p, left)
            _push(pool, head, tail, meta, target, birth, taken)
            left -= taken
        queue_len[p] -= n
        queue_len[target] += n
        routed += n
        penalty += n * link_cost[route_link[r]]
    return routed, penalty


@jit.leaf
def _serve_kernel(control, state, fifo, ints, floats, out):  # pragma: no cover - compiled
    """Steps (2)-(5) of ``Simulator._execute``: transfers, service, starts and routing.
    It allocates nothing, so it runs without reference counting (:func:`jit.leaf`).

    ``control`` is ``(transfers, route, service, start)``, ``state`` the arrays of
    :data:`STATE_FIELDS`, ``fifo`` the :class:`RunFifo`'s ``(pool, head, tail, meta)``
    and ``out`` ``(hit, done, spent, counts, sums, listed)``, ``listed`` an int64 scratch
    of one entry per action and per route (the nonzero ones are listed first, without a
    branch: a random control leaves which are zero to chance). Writes the units whose
    service completes (action, hit bit, birth slot per row, in the fixed order) into
    ``done`` and returns their number; or, with nothing changed, -1 when ``done`` has too
    few rows and -2 when the pool may run out of free rows (the caller grows them and
    calls again).
    Routed units join the next hop's tail at once: the control takes at most ``Q(t)``
    from any queue, so what joins a tail this slot is never taken this slot.
    """
    transfers, route, service, start = control
    holder, owner, memory_used, service_action, service_residual = state[:5]
    service_hit, service_birth, queue_len = state[5:]
    pool, head, tail, meta = fifo
    hit, done, spent, counts, sums, listed = out
    n_nodes = holder.shape[0]
    n_act = service.shape[0]
    bound = 0  # rows of done the slot may fill
    for i in range(n_nodes):
        if service_action[i] >= 0:
            bound += 1
    for a in range(n_act):
        bound += service[a]
    if bound > done.shape[0]:
        return -1
    moved = 0  # rows routing may take from the free list: at most one per unit
    for r in range(route.shape[0]):
        moved += route[r]
    if moved > meta[1]:
        return -2
    action_pair = _field(ints, IntField.ACTION_PAIR)
    action_node = _field(ints, IntField.ACTION_NODE)
    mu, work = _field(floats, FloatField.MU), _field(floats, FloatField.WORK)
    sums[0] = _transfer(transfers, ints, floats, holder, owner, memory_used, hit)

    # (5) Units in service take their compute first, then whole units, then starts.
    n_done = 0
    in_service_spend(mu, service_action, service_residual, spent)
    for i in range(n_nodes):
        if service_action[i] < 0:
            continue
        if service_residual[i] - spent[i] > _EPS:
            service_residual[i] -= spent[i]
            continue
        done[n_done, 0], done[n_done, 1] = service_action[i], service_hit[i]
        done[n_done, 2] = service_birth[i]
        n_done += 1
        service_action[i] = -1
        service_residual[i] = 0.0
    serving = 0
    for a in range(n_act):
        listed[serving] = a
        serving += service[a] != 0
    for x in range(serving):
        a = listed[x]
        n = service[a]
        h = hit[a]
        p = action_pair[a]
        left = n
        while left > 0:
            birth, taken = _take(pool, head, tail, meta, p, left)
            for _ in range(taken):
                done[n_done, 0], done[n_done, 1], done[n_done, 2] = a, h, birth
                n_done += 1
            left -= taken
        queue_len[p] -= n
        spent[action_node[a]] += n * work[h * n_act + a]
    counts[0] = 0  # starts
    for i in range(n_nodes):
        a = start[i]
        if a < 0:
            continue
        h = hit[a]
        p = action_pair[a]
        birth, _ = _take(pool, head, tail, meta, p, _one())
        queue_len[p] -= 1
        service_action[i], service_hit[i], service_birth[i] = a, h, birth
        service_residual[i] = work[h * n_act + a] - (mu[i] - spent[i])
        spent[i] = mu[i]
        counts[0] += 1
    counts[1], sums[1] = _route_units(route, queue_len, fifo, ints, floats, listed)
    sums[2] = 0.0  # work spent
    for i in range(n_nodes):
        sums[2] += spent[i]
    return n_done


@jit.part
def _generate(
    a, rng, draw, ints, floats, holder, owner, generated, n_gen, pending
):  # pragma: no cover
    """SPEC 1 step 6: a unit of action ``a`` served may generate an object of the action's
    signature at its node (recorded in ``generated``, row ``n_gen``). None is generated when
    the node holds the signature, a generation of it there is pending this slot, or every
    replica is owned or reserved; else with probability ``gen_prob[a]``: a draw from ``rng``
    where it is below 1, and only where ``draw`` (which is false, or ``rng`` ``None``, when
    no action has a probability strictly between 0 and 1; where one has, an action of
    probability 0 draws too, and never generates). Returns the new ``n_gen``.

    ``pending`` is ``(pending (N * S,), reserved (identities,))``, the slot's generations
    so far as flags, so that a check costs the same however many were generated (a scan
    of ``generated`` made the outcomes quadratic in the network's size)."""
    pending_slot, reserved_identity = pending
    s, i = _field(ints, IntField.ACTION_SIGNATURE)[a], _field(ints, IntField.ACTION_NODE)[a]
    if s < 0 or holder[i, s] >= 0 or pending_slot[i * holder.shape[1] + s]:
        return n_gen
    replicas = ints[Scalar.REPLICAS]
    free = -1
    for m in range(s * replicas, (s + 1) * replicas):
        if owner[m] < 0 and not reserved_identity[m]:
            free = m
            break
    p = _field(floats, FloatField.GEN_PROB)[a]
    if free < 0 or (p < 1.0 and (rng is None or not draw or not rng.random() < p)):
        return n_gen
    generated[n_gen, 0] = i
    generated[n_gen, 1] = s
    generated[n_gen, 2] = free
    pending_slot[i * holder.shape[1] + s] = True
    reserved_identity[free] = True
    return n_gen + 1


@jit.part
def _zeroed(array):  # pragma: no cover
    """``array`` (1-D) set to 0 and returned."""
    for k in range(array.shape[0]):
        array[k] = 0
    return array


@jit.part
def _retain(
    retain, ints, floats, generated, n_gen, holder, owner, memory_used, evicted, affected, scratch
):  # pragma: no cover
    """SPEC 1 step 7, by the priority map fixed before outcomes: at each node whose memory
    may change, in descending priority (ties to the lower signature) keep what fits, drop
    negative priorities, insert the kept generated objects. Returns (objects inserted,
    objects evicted, listed in ``evicted``). ``scratch`` is :func:`outcome_scratch`'s."""
    n_nodes, n_sig = holder.shape
    retain_node = _field(ints, IntField.RETAIN_NODE)
    retain_signature = _field(ints, IntField.RETAIN_SIGNATURE)
    retain_of, retain_ptr = _field(ints, IntField.RETAIN_OF), _field(ints, IntField.RETAIN_PTR)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    budget = _field(floats, FloatField.BUDGET)
    for k in range(retain.shape[0]):  # no branch on the scores' random signs
        i = retain_node[k]
        affected[i] |= (holder[i, retain_signature[k]] >= 0) & (retain[k] < 0)
    # Each node's generated objects as a list in generation order (first_gen[i], then
    # next_gen[g]): a scan of every generated object per node was quadratic in size.
    first_gen, count_gen, next_gen, key, sig, ident, new, order = scratch[2:10]
    for i in range(n_nodes):
        first_gen[i] = -1
        count_gen[i] = 0
    for g in range(n_gen - 1, -1, -1):
        node = generated[g, 0]
        affected[node] = True
        next_gen[g] = first_gen[node]
        first_gen[node] = g
        count_gen[node] += 1
    insertions = 0
    n_evicted = 0
    # One set of per-node lists for every node (key: minus the priority), as long as a
    # node's retention candidates and its generations can be.
    for i in range(n_nodes):
        if not affected[i]:
            continue
        affected[i] = False
        n = 0
        for k in range(retain_ptr[i], retain_ptr[i + 1]):
            m = holder[i, retain_signature[k]]
            if m >= 0:
                key[n], sig[n], ident[n], new[n] = -retain[k], retain_signature[k], m, False
                n += 1
        g = first_gen[i]
        while g >= 0:
            s = generated[g, 1]
            key[n], sig[n], new[n] = -retain[retain_of[i * n_sig + s]], s, True
            ident[n] = generated[g, 2]
            n += 1
            g = next_gen[g]
        # Insertion sort by (minus priority, signature): a node holds a few objects.
        for y in range(n):
            z = y - 1
            while z >= 0 and (
                key[order[z]] > key[y] or (key[order[z]] == key[y] and sig[order[z]] > sig[y])
            ):
                order[z + 1] = order[z]
                z -= 1
            order[z + 1] = y
        kept = 0.0
        for x in range(n):
            y = order[x]
            s = sig[y]
            m = ident[y]
            if key[y] <= 0 and kept + signature_size[s] <= budget[i] + _EPS:
                kept += signature_size[s]
                if new[y]:
                    holder[i, s] = m
                    owner[m] = i
                    insertions += 1
            elif not new[y]:
                holder[i, s] = -1
                owner[m] = -1
                evicted[n_evicted, 0] = i
                evicted[n_evicted, 1] = s
                n_evicted += 1
        memory_used[i] = kept
    return insertions, n_evicted


@jit.leaf
def _arrive(t, rng, uniforms, total, queue_len, fifo, ints, floats, arrivals):  # pragma: no cover
    """SPEC 1 step 8 for a Poisson ``total`` of arrivals, drawn by the caller (numba's
    Poisson sampler needs the runtime this kernel runs without, :func:`jit.leaf`): each
    arrival's uniform, drawn here from ``rng`` or, with ``rng`` ``None``, given in
    ``uniforms``, picks its pair by the mix's cumulative shares (bisect right, by halving:
    a network of many sources has many entries); each pair's arrivals join its tail as
    one run. ``arrivals`` (one entry per pair) is scratch."""
    arrival_cum = _field(floats, FloatField.ARRIVAL_CUM)
    arrival_pair = _field(ints, IntField.ARRIVAL_PAIR)
    pool, head, tail, meta = fifo
    for p in range(arrivals.shape[0]):
        arrivals[p] = 0
    for k in range(total):
        if rng is None:
            u = uniforms[k]
        else:
            u = rng.random()
        # How many shares are at most u: in [low, low + n - 1], halved with a select (a
        # branch on a uniform draw is a coin toss), the same number of steps whatever u.
        low, n = 0, arrival_cum.shape[0] + 1
        while n > 1:
            half = n // 2
            low = low + half if arrival_cum[low + half - 1] <= u else low
            n -= half
        arrivals[arrival_pair[low]] += 1
    for p in range(queue_len.shape[0]):
        if arrivals[p] > 0:
            _push(pool, head, tail, meta, p, t, arrivals[p])
            queue_len[p] += arrivals[p]


@jit.leaf
def _outcome_kernel(
    rng, draw, t, n_done, uniforms, generates, retain, state, fifo, ints, floats, out, scratch
):  # pragma: no cover - compiled
    """Steps (6)-(7) of ``Simulator._execute``: outcomes of the ``n_done`` units in
    ``done`` (their successor ``uniforms`` given) and retention; the arrivals (8) are
    :func:`_arrive`'s.

    The generation draws come from ``rng`` where ``draw`` (``rng`` is ``None`` or
    ``draw`` false when no action generates with a probability strictly between 0 and
    1). ``state`` and ``fifo`` are as for :func:`_serve_kernel`, ``out`` is ``(affected,
    done, unit_succ, unit_floats, delays, generated, evicted, counts, sums,
    served_by_action)``: the outcome goes there. ``scratch`` is :func:`outcome_scratch`'s
    for at least ``n_done`` rows: the kernel allocates nothing, so it runs without numba's
    reference counts (:func:`jit.leaf`). The pool must have ``n_done`` free rows
    (:meth:`RunFifo.reserve`).
    """
    holder, owner, memory_used, queue_len = state[0], state[1], state[2], state[7]
    pool, head, tail, meta = fifo
    affected, done, unit_succ, unit_floats, delays, generated, evicted = out[:7]
    counts, sums, served_by_action = out[7:]
    pair_commodity = _field(ints, IntField.PAIR_COMMODITY)
    work, penalty = _field(floats, FloatField.WORK), _field(floats, FloatField.PENALTY)
    successor_ptr = _field(ints, IntField.SUCCESSOR_PTR)
    successor_pair = _field(ints, IntField.SUCCESSOR_PAIR)
    successor_bound = _field(floats, FloatField.SUCCESSOR_BOUND)
    n_act = work.shape[0] // 2

    # (6) Outcomes: successors at the same node, exits, generated objects.
    _zeroed(served_by_action)
    n_slots = holder.shape[0] * holder.shape[1] if generates else 0
    pending = (_zeroed(scratch[0][:n_slots]), _zeroed(scratch[1][: owner.shape[0]]))
    n_exit = 0
    n_gen = 0
    hits = 0
    penalty_compute = 0.0
    for k in range(n_done):
        a = done[k, 0]
        h = done[k, 1]
        served_by_action[a] += 1
        hits += h
        row = h * n_act + a  # of the (hit, action) tables
        penalty_compute += penalty[row]
        unit_floats[k, 0] = work[row]
        unit_floats[k, 1] = penalty[row]
        target = -1
        for q in range(successor_ptr[row], successor_ptr[row + 1]):
            if uniforms[k] < successor_bound[q]:
                target = successor_pair[q]
                break
        if target < 0:
            delays[n_exit] = t - done[k, 2]
            n_exit += 1
            unit_succ[k] = -1
        else:
            _push(pool, head, tail, meta, target, done[k, 2], _one())
            queue_len[target] += 1
            unit_succ[k] = pair_commodity[target]
        if generates:
            n_gen = _generate(a, rng, draw, ints, floats, holder, owner, generated, n_gen, pending)

    # (7) Retention.
    insertions, n_evicted = 0, 0
    if generates:
        insertions, n_evicted = _retain(
            retain,
            ints,
            floats,
            generated,
            n_gen,
            holder,
            owner,
            memory_used,
            evicted,
            affected,
            scratch,
        )

    counts[3] = hits
    counts[4] = n_exit
    counts[5] = n_gen
    counts[6] = insertions
    counts[7] = n_evicted
    sums[3] = penalty_compute


@_compiled
def _outcome_drawing(
    rng, draw, t, n_done, uniforms, generates, retain, state, fifo, ints, floats, out, scratch
):  # pragma: no cover - compiled
    """:func:`_outcome_kernel` with a generator, called from Python. numba takes a
    reference to a generator it is handed from Python and gives it back only when the
    kernel it calls has the runtime on: a leaf called with one from Python kept a
    reference to it, and a small record, every slot."""
    _outcome_kernel(
        rng, draw, t, n_done, uniforms, generates, retain, state, fifo, ints, floats, out, scratch
    )


def outcome_sizes(ix: WorkloadIndex) -> tuple[int, int, int, int, int]:
    """What :func:`outcome_scratch` needs of the workload index ``ix``: nodes,
    signatures, objects, pairs and the most retention candidates of one node."""
    n = ix.num_nodes
    per_node = int(np.bincount(ix.retain_node, minlength=n).max(initial=0))
    return n, ix.num_signatures, ix.num_objects, ix.num_pairs, per_node


def outcome_scratch(sizes: tuple[int, int, int, int, int], rows: int) -> tuple[np.ndarray, ...]:
    """The outcome kernel's ``scratch`` for a workload of :func:`outcome_sizes` ``sizes``
    and at most ``rows`` units served: the slot's pending generations (per node and
    signature, per object), each node's first generation and count, each generation's
    next, a node's retention list (minus the priority, signature, object, whether new,
    order; as long as a node's candidates and generations can be) and the arrivals per
    pair."""
    n, n_sig, n_objects, n_pairs, per_node = sizes
    width = per_node + rows
    return (
        np.zeros(n * n_sig, dtype=np.bool_),
        np.zeros(n_objects, dtype=np.bool_),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(rows, dtype=np.int64),
        np.empty(width),
        np.empty(width, dtype=np.int64),
        np.empty(width, dtype=np.int64),
        np.empty(width, dtype=np.bool_),
        np.empty(width, dtype=np.int64),
        np.empty(n_pairs, dtype=np.int64),
    )


STATE_FIELDS = (
    "holder",
    "owner",
    "memory_used",
    "service_action",
    "service_residual",
    "service_hit",
    "service_birth",
    "queue_len",
)
"""The arrays of a :class:`~mabp_gym.core.state.SimState` the kernels take, as one tuple
in this order (:func:`state_arrays`)."""


def state_arrays(state) -> tuple[np.ndarray, ...]:
    """The kernels' ``state`` tuple of ``state`` (:data:`STATE_FIELDS`)."""
    return (
        state.holder,
        state.owner,
        state.memory_used,
        state.service_action,
        state.service_residual,
        state.service_hit,
        state.service_birth,
        state.queue_len,
    )


def _pack(arrays: list[np.ndarray], extra: list[float], dtype: type) -> np.ndarray:
    """``arrays`` in one vector: the bounds of each (``len(arrays) + 1`` entries), then
    ``extra``, then the arrays one after the other (read back with :func:`_field`)."""
    flat = [np.ravel(array) for array in arrays]
    start = len(arrays) + 1 + len(extra)
    bounds = start + np.concatenate([[0], np.cumsum([array.size for array in flat])])
    parts = [bounds, np.asarray(extra, dtype=np.float64), *flat]
    return np.concatenate(parts).astype(dtype)


def _by_node(node: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates whose node is ``node[k]``, grouped node by node (each node's in
    index order), and each node's bounds in them."""
    members = np.argsort(node, kind="stable")
    return members, np.searchsorted(node[members], np.arange(num_nodes + 1))


def slot_cost(workload, memory_used: np.ndarray, counts: list, sums: list) -> float:
    """``h(t)`` of a slot from a kernel's ``counts`` and ``sums`` (as Python lists) and the
    memory held after it, in :attr:`SlotOutcome.penalty`'s order of additions (compute,
    transmission, then memory: transfers, holding, insertions), so that every path that
    reports it gives the same float."""
    held_size = float(memory_used.sum())
    penalty_memory = sums[0] + workload.theta * held_size + workload.omega * counts[6]
    return sums[3] + sums[1] + penalty_memory


class RunFifo:
    """The compiled transition's FIFO: per pair, a linked list of rows of one pool, each
    row up to :data:`RUN_SLOTS` runs ``(birth, units)`` oldest first (``pool[k]`` is
    ``(next row, first live run, one past the last, 0, birth, units, birth, units, ...)``;
    free rows linked from ``meta[0]``, ``meta[1]`` of them), the oldest row at ``head[p]``,
    the newest at ``tail[p]``."""

    def __init__(self, num_pairs: int, rows: int = 64) -> None:
        self.pool = free_rows(rows)
        self.meta = np.asarray([0, rows], dtype=np.int64)  # first free row (-1 none), free rows
        self.head = np.full(num_pairs, -1, dtype=np.int64)
        self.tail = np.full(num_pairs, -1, dtype=np.int64)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, refusing a pool of another row layout: the kernels read rows without
        bounds checks, so a FIFO pickled by a version whose rows differ (before six runs
        to a row they were ``(birth, units, next)``) would step into wrong cells."""
        pool = state.get("pool")
        if not (isinstance(pool, np.ndarray) and pool.ndim == 2 and pool.shape[1] == ROW_WIDTH):
            found = pool.shape if isinstance(pool, np.ndarray) else type(pool).__name__
            raise ValueError(
                f"a pickled run FIFO with pool rows {found}: this version's rows are "
                f"{ROW_WIDTH} wide, so the simulator or env was pickled by another version "
                "of mabp-gym and cannot be loaded here (pickles do not move between "
                "versions); make it again and reset it with the same seed"
            )
        self.__dict__.update(state)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The kernels' ``fifo`` tuple ``(pool, head, tail, meta)`` (ask again after
        :meth:`reserve`, which may replace the pool)."""
        return self.pool, self.head, self.tail, self.meta

    def runs(self, pair: int) -> list[tuple[int, int]]:
        """Pair ``pair``'s runs ``(birth, units)``, oldest first."""
        out: list[tuple[int, int]] = []
        k = int(self.head[pair])
        while k >= 0:
            row = self.pool[k].tolist()
            cells = row[_RUNS + 2 * row[_LO] : _RUNS + 2 * row[_HI]]
            out.extend(zip(cells[::2], cells[1::2], strict=True))
            k = row[_NEXT]
        return out

    def births(self, pair: int) -> list[int]:
        return [birth for birth, count in self.runs(pair) for _ in range(count)]

    def lengths(self) -> list[int]:
        lengths = np.empty(self.head.shape[0], dtype=np.int64)
        _lengths(self.pool, self.head, lengths)
        return lengths.tolist()

    def heads(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = np.flatnonzero(self.head >= 0)
        rows = self.head[pairs]
        return pairs, self.pool[rows, _RUNS + 2 * self.pool[rows, _LO]]

    def extend(self, pair: int, birth: int, count: int) -> None:
        if count > 0:
            self.reserve(1)
            _push(self.pool, self.head, self.tail, self.meta, pair, birth, count)

    def reserve(self, rows: int) -> None:
        """Make at least ``rows`` rows free (the pool at least doubles when it grows)."""
        free = int(self.meta[1])
        if free >= rows:
            return
        old = self.pool.shape[0]
        new = max(old, rows - free)
        self.pool = grown(self.pool[None], old + new, self.meta[None])[0]
        self.meta[:] = (old, free + new)


def free_rows(rows: int, envs: int | None = None) -> np.ndarray:
    """A pool of ``rows`` free rows (one per env with ``envs``): :func:`link_free`'s."""
    return link_free(
        np.zeros((rows, ROW_WIDTH) if envs is None else (envs, rows, ROW_WIDTH), dtype=np.int64)
    )


def link_free(pool: np.ndarray, first: int = 0, then: Any = -1) -> np.ndarray:
    """``pool`` (``(rows, ROW_WIDTH)``, or one such per env) made one free list in row
    order, in place, its rows numbered from ``first`` and its last row followed by
    ``then`` (-1: none; one per env too); returned."""
    rows = pool.shape[-2]
    pool[..., _NEXT] = np.arange(first + 1, first + rows + 1)
    pool[..., -1, _NEXT] = then
    return pool


def grown(pool: np.ndarray, rows: int, meta: np.ndarray) -> np.ndarray:
    """Each env's ``pool`` (``(envs, rows, ROW_WIDTH)``) with ``rows`` rows: the new rows
    linked in order ahead of each env's free list (``meta[:, 0]``; the caller then points
    ``meta`` at the first new row and counts them free)."""
    envs, old, _ = pool.shape
    bigger = np.zeros((envs, rows, ROW_WIDTH), dtype=pool.dtype)
    bigger[:, :old] = pool
    link_free(bigger[:, old:], old, meta[:, 0])
    return bigger


class CompiledTransition:
    """One workload's static arrays, packed for the two kernels, and their outputs."""

    done: np.ndarray  # (rows, 3) action, hit bit, birth slot of each unit served

    def __init__(self, workload: Workload) -> None:
        ix = workload.index
        # The successor law of each (hit, action) row as cumulative bounds and targets.
        ptr, bounds, targets = [0], [], []
        for h in range(2):
            for a in range(ix.num_actions):
                bounds.extend(ix.successor_cum[h][a])
                targets.extend(ix.successor_pair[h][a])
                ptr.append(len(bounds))
        fields = {
            name: getattr(ix, name) for name in INT_FIELDS + FLOAT_FIELDS if hasattr(ix, name)
        }
        fields.update(
            successor_ptr=np.asarray(ptr),
            successor_pair=np.asarray(targets, dtype=np.int64),
            successor_bound=np.asarray(bounds, dtype=np.float64),
            arrival_cum=np.cumsum(ix.arrival_share)[:-1],
            retain_ptr=np.searchsorted(ix.retain_node, np.arange(ix.num_nodes + 1)),
        )
        for name, node in (("action", ix.action_node), ("route", ix.pair_node[ix.route_src_pair])):
            fields[f"node_{name}s"], fields[f"node_{name}_ptr"] = _by_node(node, ix.num_nodes)
        fields["node_pair_ptr"] = _by_node(ix.pair_node, ix.num_nodes)[1]
        self.ints = _pack([fields[name] for name in INT_FIELDS], [workload.replicas], np.int64)
        self.floats = _pack(
            [fields[name] for name in FLOAT_FIELDS],
            [workload.total_rate, workload.migration_cost],
            np.float64,
        )
        self.num_nodes, self.num_actions = ix.num_nodes, ix.num_actions
        self.num_routes, self.num_retains = ix.num_routes, ix.num_retains
        self.arrival_pairs = len(ix.arrival_pair)  # at least the pairs arrivals join
        self.total_rate = float(workload.total_rate)
        # Generation draws exist only where some action generates with 0 < gen_prob < 1.
        self.draws_in_kernel = bool(((ix.gen_prob > 0) & (ix.gen_prob < 1)).any())
        self._no_draws = np.zeros(0)
        self._sizes = outcome_sizes(ix)
        self._new_buffers()

    def field(self, name: str) -> np.ndarray:
        """The packed field ``name`` of :data:`INT_FIELDS` or :data:`FLOAT_FIELDS` as a
        view (read only by convention: the packs are shared), the same array type the
        kernels read, so that a rule called from Python compiles once."""
        if name in INT_FIELDS:
            pack, k = self.ints, INT_FIELDS.index(name)
        elif name in FLOAT_FIELDS:
            pack, k = self.floats, FLOAT_FIELDS.index(name)
        else:
            raise KeyError(f"no packed field {name!r}; the fields: {INT_FIELDS + FLOAT_FIELDS}")
        return jit._pack_field(pack, k)

    @classmethod
    def shared(cls, workload: Workload) -> CompiledTransition:
        """The workload's static arrays, built once per workload index and shared (read
        only: use :meth:`copy` for buffers of one's own)."""
        core = _SHARED.get(workload.index)
        if core is None:
            core = _SHARED[workload.index] = cls(workload)
        return core

    def copy(self) -> CompiledTransition:
        """The same static arrays (shared: read only) with buffers of its own: one per
        simulator, so that simulators of one workload never share a slot's outputs."""
        twin = copy.copy(self)
        twin._new_buffers()
        return twin

    def _new_buffers(self) -> None:
        n_nodes, n_act = self.num_nodes, self.num_actions
        self.affected = np.zeros(n_nodes, dtype=np.bool_)
        self.hit = np.zeros(n_act, dtype=np.int64)
        self.spent = np.zeros(n_nodes)
        self.counts = np.zeros(8, dtype=np.int64)  # started, routed, arrivals, hits, exits,
        # generated, insertions, evictions
        self.sums = np.zeros(4)  # transfer cost, transmission, work, compute penalty
        retains = int(self.ints[IntField.RETAIN_NODE + 1] - self.ints[IntField.RETAIN_NODE])
        self.evicted = np.zeros((max(retains, 1), 2), dtype=np.int64)
        self.served_by_action = np.zeros(n_act, dtype=np.int64)
        self._listed = np.empty(max(n_act, self.num_routes, 1), dtype=np.int64)
        self._grow_outputs(64)

    def __call__(self, state, rng, generates: bool, control) -> int:
        """Run one slot of ``state`` under the feasible ``control``, drawing from ``rng``;
        returns the units whose service completed.
        The outcome is left in :attr:`counts`, :attr:`sums` and the output arrays."""
        fifo = state.fifo
        control_arrays = (
            np.asarray(control.transfers, dtype=np.int64),
            np.asarray(control.route, dtype=np.int64),
            np.asarray(control.service, dtype=np.int64),
            np.asarray(control.start, dtype=np.int64),
        )
        arrays = state_arrays(state)
        while True:
            n_done = _serve_kernel(
                control_arrays,
                arrays,
                fifo.arrays(),
                self.ints,
                self.floats,
                (self.hit, self.done, self.spent, self.counts, self.sums, self._listed),
            )
            if n_done >= 0:
                break
            if n_done == -1:
                self._grow_outputs(2 * self.done.shape[0])
            else:
                fifo.reserve(2 * fifo.pool.shape[0])
        # A row for each completed unit's successor, and one for each pair the arrivals
        # can join (as one run a pair).
        fifo.reserve(n_done + self.arrival_pairs)
        # The draws in a fixed order: successor uniforms, generation draws (only
        # where 0 < gen_prob < 1: then the kernel draws them), arrivals.
        uniforms = rng.random(n_done) if n_done else self._no_draws
        in_kernel = rng if self.draws_in_kernel and generates else None
        self.served_by_action = np.empty(self.num_actions, dtype=np.int64)  # the outcome's own
        outcome = _outcome_kernel if in_kernel is None else _outcome_drawing
        outcome(
            in_kernel,
            in_kernel is not None,
            state.t,
            n_done,
            uniforms,
            generates,
            np.asarray(control.retain, dtype=np.float64),
            arrays,
            fifo.arrays(),
            self.ints,
            self.floats,
            (
                self.affected,
                self.done,
                self.unit_succ,
                self.unit_floats,
                self.delays,
                self.generated,
                self.evicted,
                self.counts,
                self.sums,
                self.served_by_action,
            ),
            self._scratch,
        )
        total = int(rng.poisson(self.total_rate))
        arrival_uniforms = rng.random(total) if total else self._no_draws
        pairs = self._scratch[10]
        arrays, queues = fifo.arrays(), state.queue_len
        _arrive(
            state.t, None, arrival_uniforms, total, queues, arrays, self.ints, self.floats, pairs
        )
        self.counts[2] = total
        return n_done

    def _grow_outputs(self, rows: int) -> None:
        """Output arrays of ``rows`` rows (one per unit served)."""
        self.done = np.zeros((rows, 3), dtype=np.int64)  # action, hit, birth
        self.unit_succ = np.zeros(rows, dtype=np.int64)  # successor commodity, -1 exit
        self.unit_floats = np.zeros((rows, 2))  # work, penalty
        self.delays = np.zeros(rows, dtype=np.int64)
        self.generated = np.zeros((rows, 3), dtype=np.int64)  # node, signature, identity
        self._scratch = outcome_scratch(self._sizes, rows)


_SHARED: weakref.WeakKeyDictionary[WorkloadIndex, CompiledTransition] = weakref.WeakKeyDictionary()
