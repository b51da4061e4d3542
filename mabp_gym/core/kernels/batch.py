"""The batched slot: every env's projection, transition and observation in one compiled
call, over state rows of stacked arrays (row ``i``: env ``i``).

:class:`~mabp_gym.envs.vector_env.SFMSNVectorEnv` steps ``N`` envs with :func:`step_all`;
:class:`~mabp_gym.envs.env.SFMSNEnv` steps its one env with it too (``N = 1``, the rows
views of its simulator's state), so that a training step is one compiled call. Each env's
draws come from its own generator in the simulator's order (numba draws exactly as
numpy), so the slots are those of :class:`~mabp_gym.core.simulator.Simulator`.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from mabp_gym.core.encoding import DYNAMIC_KEYS, SERVICE_FEATURES
from mabp_gym.core.kernels import jit, rules, slotcore, transition_core
from mabp_gym.core.kernels.transition_core import (
    STATE_FIELDS,
    CompiledTransition,
    IntField,
    _field,
    slot_cost,
)

_PRESSURE = SERVICE_FEATURES.index("successor_pressure")
_state_fields = operator.attrgetter(*STATE_FIELDS)  # a state's arrays, in the kernels' order
_SERVICE = DYNAMIC_KEYS.index("service")
_WARM_FROM = 64
"""From this many envs on, each env's FIFO rows are asked of the cache before its slot
(:func:`_warm_fifo`): fewer envs' pools stay in cache (16 envs: no gain)."""


_NONE = (np.array([0.0, 0.0, 0.0, 1.0, 0.0]), np.array([2**62, 2**62]))
"""Reward weights ``(theta, omega, nu, reward_scale, drift)`` and limits ``(horizon, most
steps)`` for a caller that computes its reward and its episode's end itself
(:func:`step_all` computes them all the same)."""


class SlotBuffers(NamedTuple):
    """What the kernels write for every env (row ``i``: env ``i``), by name: the kernels
    take it as one named tuple (numba reads the fields by name)."""

    transfers: np.ndarray  # (N, T) the executed transfers
    n_transfers: np.ndarray  # (N,) how many
    projection_hit: np.ndarray  # (N, A) the projection's hit bits
    route: np.ndarray  # (N, R)
    service: np.ndarray  # (N, A)
    start: np.ndarray  # (N, nodes) -1 or the action a node starts
    transition_hit: np.ndarray  # (N, A) the transition's hit bits
    done: np.ndarray  # (N, rows, 3) served units
    spent: np.ndarray  # (N, nodes) work spent per node
    counts: np.ndarray  # (N, 8) CompiledTransition.counts
    sums: np.ndarray  # (N, 4) CompiledTransition.sums
    affected: np.ndarray  # (N, nodes) bool the retention scratch
    unit_successor: np.ndarray  # (N, rows) each served unit's successor
    unit_floats: np.ndarray  # (N, rows, 2) its (work, penalty)
    delays: np.ndarray  # (N, rows) its delay
    generated: np.ndarray  # (N, rows, 3) the object it generated
    uniforms: np.ndarray  # (N, rows) its successor uniform
    evicted: np.ndarray  # (N, max(retains, 1), 2)
    queue_flat: np.ndarray  # (N, nodes * commodities + 1) float32 queues for the encoder
    encoder_hit: np.ndarray  # (N, A) the encoder's hit bits
    pairs: np.ndarray  # (N, pairs) the encoder's scratch
    slot: np.ndarray  # (N,) each env's slot
    served_by_action: np.ndarray  # (N, A)


class StackedState(NamedTuple):
    """Every env's :class:`~mabp_gym.core.state.SimState` arrays the kernels take
    (``STATE_FIELDS``), stacked one row per env."""

    holder: np.ndarray
    owner: np.ndarray
    memory_used: np.ndarray
    service_action: np.ndarray
    service_residual: np.ndarray
    service_hit: np.ndarray
    service_birth: np.ndarray
    queue_len: np.ndarray


assert StackedState._fields == STATE_FIELDS, "StackedState follows the transition's fields"


def step_all(
    first,
    active,
    scores,
    actions,
    rngs,
    episode,
    flags,
    statics,
    state_arrays,
    fifo,
    slots,
    obs,
):  # pragma: no cover
    """One slot of every active env from ``first`` on (:func:`_slot`), its backlog and
    reward (:func:`_tally`), then the observation of every env (:func:`_observe`).
    Each env's scores are its row of the float64 ``scores``, or where ``actions`` has rows
    (float32, the action space's dtype), its row of those, widened as the env reads it
    (no float64 copy of the batch).
    ``episode`` is ``(rates, units, rewards, elapsed, truncated, weights, limits, stack,
    frames)``: per env its arrival rate, backlog, reward (0 where it does not step), steps
    since its reset and whether its episode ends here (false where it does not step); the
    reward's ``(theta, omega, nu, reward_scale, drift)`` (``drift`` 1.0: the
    drift-plus-penalty reward, else the backlog's); the episode's ``(horizon, most
    steps)``; :func:`sum_scratch`. ``state_arrays`` are the fields of a
    :class:`StackedState` as a plain tuple (numba types a named tuple argument about 1.2 us
    slower a call); the kernel names them again. ``slots`` is a :class:`SlotArrays`'
    pack: the :class:`SlotBuffers` and :func:`scratch`'s arrays (shared by the envs, one
    slot at a time) the kernel views in it (:func:`_unpack`). Each env's
    slot and observation run without numba's reference counts (:func:`jit.leaf`): only
    this loop takes a reference, once a call, to what it passes on.

    Returns ``(env, code, ends)``: ``(N, 0, ends)`` when every env is done, ``ends``
    the number of envs whose episode ends with this slot; or, with ``ends`` 0, the first
    env whose served-unit rows (-1) or pool rows (-2) could run short, with nothing of it
    changed (the caller grows them and calls again from that env), or an active env whose
    scores hold NaN or inf (-3; checked from ``first`` 0 only, before any env steps), or,
    once every env is done, the first whose reward overflowed its float (-4)."""
    state, (out, scratch) = StackedState(*state_arrays), _unpack(slots)
    rates, rewards, truncated, drift = episode[0], episode[2], episode[4], episode[5][4] != 0.0
    for i in range(first, scores.shape[0] if first == 0 else 0):  # before any env steps
        if active[i] and not _finite(_scores_row(i, scores, actions, scratch[2])):
            return i, -3, 0
    for i in range(first, scores.shape[0]):
        rewards[i], truncated[i] = 0.0, False
        if active[i]:
            rng = rngs[i]
            before = _lyapunov(i, statics, state, out) if drift else 0.0
            code = _slot(i, scores, actions, rng, flags, statics, state, fifo, out, scratch)
            if code < 0:
                return i, code, 0
            # The arrivals' Poisson total here (each env's own rate: a load interval draws
            # one per episode): numba's sampler needs its runtime.
            _arrivals(i, rng, rng.poisson(rates[i]), statics, state, fifo, out, scratch[1])
            _tally(i, before, statics, state, out, episode)
    for i in range(scores.shape[0]):
        _observe(i, flags[0], flags[4], statics, state, out, obs)
    ends = 0
    for i in range(scores.shape[0]):
        if not np.isfinite(rewards[i]):
            return i, -4, 0
        ends += truncated[i]
    return scores.shape[0], 0, ends


def _finite(row):  # pragma: no cover
    """Whether no float64 of ``row`` is NaN or inf (none has every exponent bit set): one
    branchless pass over their bits."""
    bits = row.view(np.int64)
    top = 0
    for k in range(bits.shape[0]):
        top |= (((bits[k] >> 52) & 0x7FF) + 1) >> 11
    return top == 0


def _scores_row(i, scores, actions, row):  # pragma: no cover
    """Env ``i``'s scores as float64: its row of ``scores``, or where ``actions`` has rows,
    its row of those written into ``row`` (float32 widens exactly, NaN and inf
    included)."""
    if actions.shape[0] == 0:
        return scores[i]
    given = actions[i]
    for k in range(row.shape[0]):
        row[k] = given[k]
    return row


def _state_row(i, state):  # pragma: no cover
    """Env ``i``'s ``state`` tuple (the transition's ``STATE_FIELDS``)."""
    holder, owner, memory_used, s_action, s_residual, s_hit, s_birth, queue_len = state
    return (
        holder[i],
        owner[i],
        memory_used[i],
        s_action[i],
        s_residual[i],
        s_hit[i],
        s_birth[i],
        queue_len[i],
    )


def _slot(i, scores, actions, rng, flags, statics, state, fifo, out, scratch):  # pragma: no cover
    """Env ``i``'s slot in the single env's order up to the arrivals (:func:`_arrivals`):
    the projection, steps (1)-(5) of the transition, its draws from its own generator
    (numba draws exactly as numpy), steps (6)-(7). Returns 0, or -1 / -2 (rows short,
    nothing changed); its scores: :func:`_scores_row`."""
    ints, floats = statics[0]  # the transition's packs of the workload's static arrays
    pool, head, tail, meta = fifo
    transfers, n_transfers, hit, route, service = (
        out.transfers,
        out.n_transfers,
        out.projection_hit,
        out.route,
        out.service,
    )
    start, hit_t, done, spent = out.start, out.transition_hit, out.done, out.spent
    counts, sums = out.counts, out.sums
    st = _state_row(i, state)
    if scores.shape[0] >= _WARM_FROM:
        _warm_fifo(pool[i], head[i], tail[i], meta[i], st[7])
    hit[i, :] = 0
    route[i, :] = 0
    service[i, :] = 0
    start[i, :] = -1
    row = _scores_row(i, scores, actions, scratch[2])
    n_transfers[i] = _project(
        row,
        flags[0],
        st,
        ints,
        floats,
        scratch[0],
        (transfers[i], hit[i], route[i], service[i], start[i]),
        statics[2],
    )
    # Rows the slot may take: one per unit served or routed, and one per pair the
    # arrivals can join (they join a pair as one run): a push takes at most one row.
    bound = state[0].shape[1] + service[i].sum()
    if bound > done.shape[1]:
        return -1
    arrival_pairs = _field(ints, IntField.ARRIVAL_PAIR).shape[0]
    if meta[i, 1] < bound + route[i].sum() + arrival_pairs:
        return -2
    # The serve's list scratch: the projection's sort positions, free once it is done.
    served = _serve(
        (transfers[i, : n_transfers[i]], route[i], service[i], start[i]),
        st,
        (pool[i], head[i], tail[i], meta[i]),
        ints,
        floats,
        (hit_t[i], done[i], spent[i], counts[i], sums[i], scratch[0][2]),
    )
    _outcomes(i, served, row, rng, flags, statics, st, fifo, out, scratch[1])
    return 0


def _warm_fifo(pool, head, tail, meta, queue_len):  # pragma: no cover
    """Ask the cache for the FIFO rows an env's slot reads: the first line of each queued
    pair's head and tail row (the header, and the first runs), and of the first free row,
    a projection ahead of the reads. With many envs an env's pool leaves the cache between
    its slots, and every take and push waited for its row (a fifth of a step's time at 256
    envs, when a row held one run). Walking the free list to warm more of it cost more than
    it saved once a row held several runs (a new row is needed every few runs)."""
    if not jit.COMPILED:
        return
    row = pool.shape[1] * pool.itemsize
    for p in range(head.shape[0]):
        if queue_len[p] > 0:
            jit.prefetch(pool, head[p] * row)
            jit.prefetch(pool, tail[p] * row)
    if meta[0] >= 0:
        jit.prefetch(pool, meta[0] * row)


def _outcomes(i, served, row, rng, flags, statics, st, fifo, out, scratch):  # pragma: no cover
    """Env ``i``'s draws (its ``served`` units' successor uniforms; the kernel draws the
    generations where some are drawn) and steps (6)-(7); ``row`` its scores, ``st`` its
    state tuple, ``scratch`` the outcome kernel's."""
    memory, generates, in_kernel, retain_at, _ = flags
    ints, floats = statics[0]
    pool, head, tail, meta = fifo
    done, counts, sums = out.done, out.counts, out.sums
    affected, unit_succ, unit_floats = out.affected, out.unit_successor, out.unit_floats
    delays, generated, evicted = out.delays, out.generated, out.evicted
    t = out.slot
    fifo_i = (pool[i], head[i], tail[i], meta[i])
    uniforms = out.uniforms[i, :served]
    for k in range(served):
        uniforms[k] = rng.random()
    rest = (
        affected[i],
        done[i],
        unit_succ[i],
        unit_floats[i],
        delays[i],
        generated[i],
        evicted[i],
        counts[i],
        sums[i],
        out.served_by_action[i],
    )
    retain = row[retain_at:]
    _outcome(
        rng,
        in_kernel,
        t[i],
        served,
        uniforms,
        generates,
        retain,
        st,
        fifo_i,
        ints,
        floats,
        rest,
        scratch,
    )


def _arrivals(i, rng, total, statics, state, fifo, out, scratch):  # pragma: no cover
    """Env ``i``'s step (8), ``total`` arrivals (their uniforms from ``rng``), and the end
    of its slot."""
    ints, floats = statics[0]
    pool, head, tail, meta = fifo
    fifo_i = (pool[i], head[i], tail[i], meta[i])
    t = out.slot
    no_uniforms = out.uniforms[i, :0]  # drawn from ``rng`` instead
    _arrive(t[i], rng, no_uniforms, total, state.queue_len[i], fifo_i, ints, floats, scratch[10])
    out.counts[i, 2] = total
    t[i] += 1


def _lyapunov(i, statics, state, out):  # pragma: no cover
    """Env ``i``'s Lyapunov function, half the sum of its squared backlog per pair (units
    in service included), as :func:`mabp_gym.envs.env._lyapunov` gives it: squared in
    float64 and so exact, in any order, while the sum stays below 2**53. ``out.pairs[i]``
    is its scratch (the encoder's, which fills it again)."""
    action_pair, backlog = _field(statics[0][0], IntField.ACTION_PAIR), out.pairs[i]
    rules.backlog_pairs(state.queue_len[i], state.service_action[i], action_pair, backlog)
    total = 0.0
    for p in range(backlog.shape[0]):
        units = float(backlog[p])
        total += units * units
    return 0.5 * total


def _tally(i, before, statics, state, out, episode):  # pragma: no cover
    """Env ``i``'s backlog and reward after its slot, in the single env's order of
    operations (:func:`~mabp_gym.core.kernels.transition_core.slot_cost`, then
    :meth:`~mabp_gym.envs.env.SFMSNEnv._reward`), so that they are the same floats;
    ``before``: its Lyapunov function before the slot (drift only). Its episode is
    truncated at the horizon or after the most steps (the vector env's rule,
    :meth:`~mabp_gym.envs.vector_env.SFMSNVectorEnv._truncation`)."""
    units, rewards, elapsed, truncated = episode[1], episode[2], episode[3], episode[4]
    weights, limits = episode[5], episode[6]
    elapsed[i] += 1
    truncated[i] = (out.slot[i] >= limits[0]) | (elapsed[i] >= limits[1])
    counts, sums = out.counts[i], out.sums[i]
    units[i] += counts[2] - counts[4]  # arrivals - completed
    held = 0.0 + rules.numpy_sum(state.memory_used[i], episode[7], episode[8])  # as numpy
    penalty_memory = sums[0] + weights[0] * held + weights[1] * counts[6]
    cost = weights[2] * (sums[3] + sums[1] + penalty_memory)
    if weights[4] != 0.0:
        rewards[i] = -(_lyapunov(i, statics, state, out) - before + cost) / weights[3]
    else:
        rewards[i] = -(units[i] + cost) / weights[3]


def _observe(i, memory, fill, statics, state, out, obs):  # pragma: no cover
    """Env ``i``'s observation into row ``i`` of the batch; its static columns only with
    ``fill`` (``flags[4]``: false where the rows are the vector env's own buffers, which
    hold them from the reset on; fresh arrays every step need them)."""
    (ints, floats), enc_statics = statics[0], statics[1]
    queue_flat, hit_e = out.queue_flat, out.encoder_hit
    nodes, queues, resident, service_o, route_o, transfer_o, retain_o, mask = obs
    _encode(
        memory,
        _state_row(i, state),
        ints,
        floats,
        enc_statics,
        (
            queue_flat[i],
            hit_e[i],
            nodes[i],
            queues[i],
            resident[i],
            service_o[i],
            route_o[i],
            transfer_o[i],
            retain_o[i],
            mask[i],
            out.pairs[i],
        ),
        fill,
    )


def scratch(ix: Any, rows: int) -> tuple[np.ndarray, ...]:
    """The kernels' scratch arrays for the workload index ``ix`` and ``rows`` served units
    an env at most: the projection's
    (:func:`~mabp_gym.core.kernels.slotcore.projection_scratch`), the outcome's
    (:func:`~mabp_gym.core.kernels.transition_core.outcome_scratch`) and an env's float64
    scores (:func:`_scores_row`), one after the other."""
    rows_scratch = transition_core.outcome_scratch(transition_core.outcome_sizes(ix), rows)
    return (*slotcore.projection_scratch(ix), *rows_scratch, np.zeros(ix.num_scores))


PACKED_DTYPES = (np.int8, np.bool_, np.int64, np.float64, np.float32)
"""The dtypes of :func:`pack_arrays`'s buffers, in order."""
_WIDEST = 3  # the most dimensions of a packed array


def pack_arrays(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """``arrays`` copied into one buffer per dtype of :data:`PACKED_DTYPES`, one after
    the other: the buffers and ``at``, row ``k`` of which places array ``k``: ``(its
    dtype's place in PACKED_DTYPES, start in that buffer, ndim, *shape)``
    (:func:`packed_views` gives them back as views)."""
    at = np.zeros((len(arrays), 3 + _WIDEST), dtype=np.int64)
    used = [0] * len(PACKED_DTYPES)
    for k, array in enumerate(arrays):
        if array.dtype.type not in PACKED_DTYPES or array.ndim > _WIDEST:
            raise TypeError(
                f"array {k} is {array.dtype}, {array.ndim}-D: a pack holds arrays of "
                f"{[np.dtype(d).name for d in PACKED_DTYPES]} of at most {_WIDEST} dimensions"
            )
        kind = PACKED_DTYPES.index(array.dtype.type)
        at[k, :3] = kind, used[kind], array.ndim
        at[k, 3 : 3 + array.ndim] = array.shape
        used[kind] += array.size
    packed = (*(np.zeros(max(n, 1), dtype=d) for n, d in zip(used, PACKED_DTYPES, strict=True)), at)
    for view, array in zip(packed_views(packed), arrays, strict=True):
        view[...] = array
    return packed


def packed_views(packed: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """The arrays of a :func:`pack_arrays` pack, as views of its buffers."""
    at = packed[-1]
    return [
        jit._shaped(packed[kind], start, tuple(row[3 : 3 + ndim]))
        for row in at.tolist()
        for kind, start, ndim in (row[:3],)
    ]


class SlotArrays:
    """The slot's :class:`SlotBuffers` and the kernels' :func:`scratch` of ``N`` envs,
    packed (:func:`pack_arrays`): :func:`step_all` takes the six arrays of
    :attr:`packed` where it took 46, and numba's unboxing of each array an argument holds
    costs an allocation and its release, 50 ns (``benchmarks/RESULTS.md``).
    :attr:`out` is the buffers' view of the slot's outputs. A copy (deep or pickled) is
    made from the copied pack, so that its views are of its own buffers."""

    def __init__(self, out: SlotBuffers, scratch_arrays: tuple[np.ndarray, ...]) -> None:
        self._from(pack_arrays((*out, *scratch_arrays)))

    def _from(self, packed: tuple[np.ndarray, ...]) -> None:
        self.packed = packed
        self.out = SlotBuffers(*packed_views(packed)[: len(SlotBuffers._fields)])

    @classmethod
    def of_pack(cls, packed: tuple[np.ndarray, ...]) -> SlotArrays:
        """Those of a pack (its arrays, not copies)."""
        made = cls.__new__(cls)
        made._from(packed)
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (SlotArrays.of_pack, (self.packed,))


def slot_arrays(n_envs: int, ix: Any, rows: int) -> SlotArrays:
    """Fresh :class:`SlotArrays` for ``n_envs`` envs of the workload index ``ix``, with
    ``rows`` served-unit rows per env."""
    return SlotArrays(slot_buffers(n_envs, ix, rows), scratch(ix, rows))


def more_rows(slots: SlotArrays, ix: Any) -> SlotArrays:
    """``slots`` with twice the served-unit rows per env, keeping what the envs already
    served wrote (``done``); ``ix`` the workload index."""
    out = slots.out
    n_envs, rows = out.done.shape[:2]
    done = np.zeros((n_envs, 2 * rows, 3), dtype=np.int64)
    done[:, :rows] = out.done
    successor, floats, delays, generated, uniforms = unit_rows(n_envs, 2 * rows)
    out = out._replace(
        done=done,
        unit_successor=successor,
        unit_floats=floats,
        delays=delays,
        generated=generated,
        uniforms=uniforms,
    )
    return SlotArrays(out, scratch(ix, 2 * rows))


def _v1(buffer, at, k):  # pragma: no cover
    """Array ``k`` of a pack, one dimension (:func:`pack_arrays`)."""
    return buffer[at[k, 1] : at[k, 1] + at[k, 3]]


def _v2(buffer, at, k):  # pragma: no cover
    """Array ``k`` of a pack, two dimensions."""
    return jit.shaped(buffer, at[k, 1], (at[k, 3], at[k, 4]))


def _v3(buffer, at, k):  # pragma: no cover
    """Array ``k`` of a pack, three dimensions."""
    return jit.shaped(buffer, at[k, 1], (at[k, 3], at[k, 4], at[k, 5]))


def _unpack(packed):  # pragma: no cover
    """A :class:`SlotArrays` pack as the kernels take it: ``(out, scratch)``, the
    :class:`SlotBuffers` and ``(projection's, outcome's, scores row)`` scratch, views of
    the buffers chosen by each array's dtype (``tests/test_vector_env.py`` holds them to
    the views :func:`packed_views` makes)."""
    small, flags, ints, floats, singles, at = packed
    out = SlotBuffers(
        _v2(ints, at, 0),
        _v1(ints, at, 1),
        _v2(ints, at, 2),
        _v2(ints, at, 3),
        _v2(ints, at, 4),
        _v2(ints, at, 5),
        _v2(ints, at, 6),
        _v3(ints, at, 7),
        _v2(floats, at, 8),
        _v2(ints, at, 9),
        _v2(floats, at, 10),
        _v2(flags, at, 11),
        _v2(ints, at, 12),
        _v3(floats, at, 13),
        _v2(ints, at, 14),
        _v3(ints, at, 15),
        _v2(floats, at, 16),
        _v3(ints, at, 17),
        _v2(singles, at, 18),
        _v2(ints, at, 19),
        _v2(ints, at, 20),
        _v1(ints, at, 21),
        _v2(ints, at, 22),
    )
    projection = (
        _v1(small, at, 23),
        _v1(floats, at, 24),
        _v1(ints, at, 25),
        _v1(ints, at, 26),
        _v1(flags, at, 27),
        _v1(floats, at, 28),
        _v1(floats, at, 29),
        _v1(floats, at, 30),
        _v1(ints, at, 31),
        _v1(ints, at, 32),
        _v2(ints, at, 33),
    )
    outcome = (
        _v1(flags, at, 34),
        _v1(flags, at, 35),
        _v1(ints, at, 36),
        _v1(ints, at, 37),
        _v1(ints, at, 38),
        _v1(floats, at, 39),
        _v1(ints, at, 40),
        _v1(ints, at, 41),
        _v1(flags, at, 42),
        _v1(ints, at, 43),
        _v1(ints, at, 44),
    )
    return out, (projection, outcome, _v1(floats, at, 45))


def no_actions() -> np.ndarray:
    """``step_all``'s ``actions`` where the scores are float64 (no rows)."""
    return np.zeros((0, 0), dtype=np.float32)


def sum_scratch() -> tuple[np.ndarray, np.ndarray]:
    """:func:`~mabp_gym.core.kernels.rules.numpy_sum`'s scratch: its stack and frames."""
    return np.empty(64), np.empty(3 * 64, dtype=np.int64)


def generators(rngs: list[np.random.Generator]) -> Any:
    """The envs' generators as the compiled kernel takes them (numba's typed list)."""
    from numba.typed import List

    return List(rngs)


if jit.COMPILED:
    _project = slotcore._project_compiled
    _encode = slotcore.encode_compiled
    _serve = transition_core._serve_kernel
    _outcome = transition_core._outcome_kernel
    _arrive = transition_core._arrive
    _warm_fifo = jit.part(_warm_fifo)
    _outcomes = jit.part(_outcomes)
    _state_row = jit.part(_state_row)
    _finite = jit.part(_finite)
    _scores_row = jit.part(_scores_row)
    _v1 = jit.part(_v1)
    _v2 = jit.part(_v2)
    _v3 = jit.part(_v3)
    _unpack = jit.part(_unpack)
    _slot = jit.leaf(_slot)
    _arrivals = jit.leaf(_arrivals)
    _observe = jit.leaf(_observe)
    _lyapunov = jit.part(_lyapunov)
    _tally = jit.leaf(_tally)
    step_all = jit.kernel(step_all)


def unit_rows(n_envs: int, rows: int) -> list[np.ndarray]:
    """The per-unit outputs of ``rows`` rows per env: successor, (work, penalty), delay,
    generated object, successor uniform."""
    return [
        np.zeros((n_envs, rows), dtype=np.int64),
        np.zeros((n_envs, rows, 2)),
        np.zeros((n_envs, rows), dtype=np.int64),
        np.zeros((n_envs, rows, 3), dtype=np.int64),
        np.zeros((n_envs, rows)),
    ]


def slot_buffers(n_envs: int, ix: Any, rows: int) -> SlotBuffers:
    """Fresh :class:`SlotBuffers` for ``n_envs`` envs of the workload index ``ix``, with
    ``rows`` served-unit rows per env."""
    n, a = ix.num_nodes, ix.num_actions
    successor, unit_floats, delays, generated, uniforms = unit_rows(n_envs, rows)
    return SlotBuffers(
        transfers=np.zeros((n_envs, ix.num_transfers), dtype=np.int64),
        n_transfers=np.zeros(n_envs, dtype=np.int64),
        projection_hit=np.zeros((n_envs, a), dtype=np.int64),
        route=np.zeros((n_envs, ix.num_routes), dtype=np.int64),
        service=np.zeros((n_envs, a), dtype=np.int64),
        start=np.full((n_envs, n), -1, dtype=np.int64),
        transition_hit=np.zeros((n_envs, a), dtype=np.int64),
        done=np.zeros((n_envs, rows, 3), dtype=np.int64),
        spent=np.zeros((n_envs, n)),
        counts=np.zeros((n_envs, 8), dtype=np.int64),
        sums=np.zeros((n_envs, 4)),
        affected=np.zeros((n_envs, n), dtype=np.bool_),
        unit_successor=successor,
        unit_floats=unit_floats,
        delays=delays,
        generated=generated,
        uniforms=uniforms,
        evicted=np.zeros((n_envs, max(ix.num_retains, 1), 2), dtype=np.int64),
        queue_flat=np.zeros((n_envs, n * ix.num_commodities + 1), dtype=np.float32),
        encoder_hit=np.zeros((n_envs, a), dtype=np.int64),
        pairs=np.zeros((n_envs, ix.num_pairs), dtype=np.int64),
        slot=np.zeros(n_envs, dtype=np.int64),
        served_by_action=np.zeros((n_envs, a), dtype=np.int64),
    )


def long_pressure(encoder: Any, out: SlotBuffers, service: np.ndarray) -> None:
    """The successor-pressure column of ``service`` (``(N, A, features)``) with numpy's
    pairwise float32 sum, where the encoder's successor laws have 8 terms or more (the
    kernel adds shorter ones itself, in numpy's order)."""
    if encoder.long_laws:
        probs = encoder._successor_probs[out.encoder_hit, encoder._arange_a]
        queued = out.queue_flat[:, encoder._successor_positions]
        service[:, :, _PRESSURE] = (probs * queued).sum(axis=-1)


def observation_specs(encoder: Any, n_envs: int) -> tuple[tuple[Any, ...], ...]:
    """How to make the arrays of the observation's ``DYNAMIC_KEYS`` for ``n_envs`` envs
    that the kernel fills with its static columns (``flags[4]``): it writes each one whole
    but the queue matrix (the pairs' entries only, so that one starts zeroed), and fresh
    arrays every step need no copy afterwards. For :func:`fresh_observation`."""
    return tuple(
        (np.zeros if key == "queues" else np.empty, (n_envs, *encoder.layout[key].shape), dtype)
        for key in DYNAMIC_KEYS
        for dtype in (encoder.layout[key].dtype,)
    )


def fresh_observation(specs: tuple[tuple[Any, ...], ...]) -> tuple[np.ndarray, ...]:
    """New arrays of :func:`observation_specs` ``specs``."""
    return tuple(make(shape, dtype=dtype) for make, shape, dtype in specs)


class FusedStep:
    """One simulator's slot and observation in one compiled call: :func:`step_all` with
    one env whose state rows are views of the simulator's own arrays (the training path of
    :class:`~mabp_gym.envs.env.SFMSNEnv`). Made per episode: the simulator's state and
    generator are new at each reset.

    Args:
        sim: a :class:`~mabp_gym.core.simulator.Simulator` just reset, without invariant
            checks. encoder: its :class:`~mabp_gym.core.encoding.ObservationEncoder`.
    """

    def __init__(self, sim: Any, encoder: Any) -> None:
        self.sim, self.encoder = sim, encoder
        wl = sim.workload
        ix = wl.index
        core = CompiledTransition.shared(wl)
        self.statics = (
            (core.ints, core.floats),
            encoder.kernel_statics,
            slotcore.radix_sort(ix),
        )
        generates = bool(sim._generates)
        in_kernel = bool(core.draws_in_kernel and generates)
        self.flags = (bool(sim.memory), generates, in_kernel, ix.score_slices[3].start, True)
        self.slots = slot_arrays(1, ix, 64)
        self.active = np.ones(1, dtype=np.bool_)
        # Its arrival rate, backlog and reward (the env computes its own: weights of none).
        rate, one = np.array([float(wl.total_rate)]), np.zeros(1, np.int64)
        ends = (one.copy(), np.zeros(1, bool), *_NONE, *sum_scratch())
        self.episode = (rate, one, np.zeros(1), *ends)
        self.rngs = generators([sim.rng])
        self._obs_specs = observation_specs(encoder, 1)
        self.obs: tuple[np.ndarray, ...] = ()
        state = self._state = sim.state
        self.state = tuple(getattr(state, name)[None] for name in STATE_FIELDS)
        self._arrays = _state_fields(state)
        self._rng = sim.rng
        self._kernel = jit.Typed(step_all)
        self._no_actions = no_actions()
        self._bind_fifo()

    def bound_to(self, sim: Any) -> bool:
        """Whether this step still runs ``sim``: the same simulator, state, arrays and
        generator as when it was made (a reset or a state set from outside changes them)."""
        state = sim.state
        return (
            sim is self.sim
            and state is self._state
            and sim.rng is self._rng
            and all(map(operator.is_, _state_fields(state), self._arrays))
        )

    def _bind_fifo(self) -> None:
        self._pool = self.sim.state.fifo.pool
        self.fifo = tuple(array[None] for array in self.sim.state.fifo.arrays())

    def step(self, scores: np.ndarray) -> tuple[float, int]:
        """Project the checked float64 ``scores`` and run the slot; returns ``(h(t),
        backlog)`` and leaves the observation in :attr:`obs`."""
        sim, st, out = self.sim, self.sim.state, self.slots.out
        if st.fifo.pool is not self._pool:  # a reserve outside the kernel replaced it
            self._bind_fifo()
        out.slot[0] = st.t
        self.obs = fresh_observation(self._obs_specs)
        if scores.dtype != np.float64 or scores.ndim != 1:  # the entry point's types
            raise TypeError(f"the fused step takes a 1-D float64 array, got {scores.dtype}")
        while True:
            args = (
                0,
                self.active,
                np.ascontiguousarray(scores)[None],  # one compiled layout for every action
                self._no_actions,
                self.rngs,
                self.episode,
                self.flags,
                self.statics,
                self.state,
                self.fifo,
                self.slots.packed,
                self.obs,
            )
            _, code, _ = self._kernel.call(args)
            if code == 0:
                break
            if code == -1:  # more served-unit rows: nothing of the slot has happened yet
                self.slots = more_rows(self.slots, sim.workload.index)
                out = self.slots.out
                out.slot[0] = st.t
            else:
                st.fifo.reserve(2 * st.fifo.pool.shape[0])
                self._bind_fifo()
        long_pressure(self.encoder, out, self.obs[_SERVICE])
        counts, sums = out.counts[0].tolist(), out.sums[0].tolist()
        st.units += counts[2] - counts[4]  # arrivals - completed
        st.t = st.t + 1
        return slot_cost(sim.workload, st.memory_used, counts, sums), st.units

    def observation(self) -> dict[str, np.ndarray]:
        """The slot's observation (the encoder's dict), arrays of its own."""
        return self.encoder._observation(*(array[0] for array in self.obs))
