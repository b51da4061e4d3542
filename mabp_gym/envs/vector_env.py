"""A batched vector env: ``N`` SFMSN envs whose slots run in one compiled call per step.

``gymnasium.make_vec(id, num_envs=N)`` builds it for every registered SFMSN id (the ids'
``vector_entry_point``; ``vectorization_mode="sync"`` or ``"async"`` still give Gymnasium's
own). Each env is an :class:`~mabp_gym.envs.env.SFMSNEnv` whose state arrays are rows of one
stacked array per field, so that one compiled loop (:func:`~mabp_gym.core.kernels.batch.step_all`)
projects, serves and runs the outcomes of every env's slot, each env drawing from its own
generator in the single env's order (numba's generator draws as numpy's), and encodes the
observations into the batch. Observations, rewards and truncations are those of ``N``
single envs with the same seeds (``tests/test_vector_env.py`` compares them step by step);
autoreset is Gymnasium's ``NEXT_STEP``: the step after an env truncates resets it (its
action ignored, reward 0). A Dict observation's keys come in the order of the Dict space,
as from Gymnasium's sync and async vector envs.

The compiled path needs numba and covers the training configuration (``diagnostics`` and
``check_invariants`` off, the built-in reward). Otherwise, or with ``MABP_GYM_PURE=1``,
each env steps on its own (same results, without the speed-up), and the per-step ``info``
holds the envs' diagnostics in Gymnasium's vector form."""

from __future__ import annotations

import copy
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from mabp_gym.core.encoding import symlog
from mabp_gym.core.kernels import jit, slotcore
from mabp_gym.core.kernels.batch import (
    StackedState,
    fresh_observation,
    generators,
    long_pressure,
    more_rows,
    no_actions,
    observation_specs,
    slot_arrays,
    step_all,
    sum_scratch,
)
from mabp_gym.core.kernels.transition_core import (
    STATE_FIELDS,
    CompiledTransition,
    RunFifo,
    free_rows,
    grown,
    link_free,
)
from mabp_gym.core.validate import checked_action, is_seed
from mabp_gym.envs.env import FLAT_KEYS, SFMSNEnv, not_finite_reward

_AUTORESET = getattr(gym.vector, "AutoresetMode", None)
_STATIC_KEYS = (
    "edge_index",
    "edge_features",
    "service_index",
    "route_index",
    "transfer_index",
    "retain_index",
)
_DYNAMIC_KEYS = FLAT_KEYS  # the arrays a step changes, in the kernel's order
_OUT_ROWS = 64  # rows per env of the served-unit outputs, doubled when a slot needs more


def checked_scores(
    actions: Any,
    needs_reset: np.ndarray,
    num_scores: int,
    out: np.ndarray | None = None,
    finite: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """A batch of actions as ``(N, D)`` float64 scores, and which envs autoreset this step.

    An env that autoresets ignores its row (Gymnasium's next-step autoreset, as
    ``SyncVectorEnv`` does): only the rows of envs that step must be finite, and the
    resetting rows are zeros in the returned array (a copy then: the caller's stays).
    With ``out`` (float64, ``(N, D)``) the scores are written there and ``out`` returned
    (one pass instead of a converted copy and a second copy into it); it holds whatever
    the batch was where the batch is refused. ``finite=False`` leaves NaN and inf to the
    caller (the batched kernel refuses them before any env steps: :func:`not_finite`).

    Raises:
        ValueError: not real numbers, not of shape ``(N, D)``, or NaN / inf in a row that
            steps; nothing but ``out`` is changed.
    """
    actions = checked_action(actions, "the action batch")
    expected = (needs_reset.shape[0], num_scores)
    if (actions.shape if isinstance(actions, np.ndarray) else np.shape(actions)) != expected:
        raise ValueError(
            f"actions must have shape {expected} (one score vector per env), "
            f"got {np.shape(actions)}"
        )
    if out is None:
        scores = np.asarray(actions, dtype=np.float64)
    else:
        scores = out
        np.copyto(scores, actions)
    resetting = needs_reset.copy()
    if not resetting.any() and (not finite or sum_is_finite(scores)):
        return scores, resetting
    if resetting.any():
        if out is None:
            scores = np.where(resetting[:, None], 0.0, scores)
        else:
            scores[resetting] = 0.0
    if finite:  # the rows of envs that step
        bad = ~np.isfinite(scores).all(axis=1) & ~resetting
        if bad.any():
            raise not_finite(bad)
    return scores, resetting


def returned_observation(
    arrays: dict[str, np.ndarray],
    static_rows: dict[str, np.ndarray],
    dynamic: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The Dict observation a step returns with ``copy=True``, in ``arrays``' key order:
    each static key (those of ``static_rows``, the same for every env and step) a new
    array with its row in every env's row, written without reading ``arrays`` back (two
    thirds of a copy's time at 1,024 envs); the others ``dynamic``'s where given, else
    ``arrays``' own."""
    source = arrays if dynamic is None else dynamic
    obs = {}
    for key, value in arrays.items():
        if key in static_rows:
            obs[key] = np.empty_like(value)
            obs[key][...] = static_rows[key]
        else:
            obs[key] = source[key]
    return obs


def sum_is_finite(scores: np.ndarray) -> bool:
    """Whether the sum of ``scores`` is finite: then none is NaN or inf (one pass, no
    temporary). Finite scores may overflow the sum: quietly, whatever numpy's settings."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(scores.sum()))


def not_finite(bad: np.ndarray) -> ValueError:
    """The error of a batch whose rows ``bad`` (of envs that step) hold NaN or inf."""
    return ValueError(
        f"actions must be finite; env(s) {np.flatnonzero(bad).tolist()} got NaN or inf"
    )


def env_seeds(seed: Any, num_envs: int) -> list[int | None]:
    """One seed (or None) per env: ``seed + i`` for an integer, or a sequence of them;
    every one checked before any env is reset."""
    if seed is None or is_seed(seed):
        return [None if seed is None else int(seed) + i for i in range(num_envs)]
    if isinstance(seed, (list, tuple, np.ndarray)) and len(seed) == num_envs:
        bad = [i for i, s in enumerate(seed) if s is not None and not is_seed(s)]
        if not bad:
            return [None if s is None else int(s) for s in seed]
        raise ValueError(
            f"seed of env(s) {bad} must be an integer >= 0 or None, got {[seed[i] for i in bad]!r}"
        )
    raise ValueError(
        f"seed must be None, an integer >= 0 or a sequence of {num_envs} seeds "
        f"(one per env), got {seed!r}"
    )


def reset_mask(options: dict[str, Any] | None, num_envs: int, reset_once: bool) -> np.ndarray:
    """Which envs a reset resets: all, or Gymnasium's ``options={"reset_mask": mask}``
    (a bool array, one per env, at least one True; the others keep their episode)."""
    if options is not None and not isinstance(options, dict):  # "abc" read as keys a, b, c
        raise TypeError(f"options must be a dict or None, got {options!r}")
    options = dict(options or {})
    mask = options.pop("reset_mask", None)
    if options:
        raise ValueError(f"options are not supported but reset_mask, got {sorted(options)}")
    if mask is None:
        return np.ones(num_envs, dtype=bool)
    if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_):  # TypeError, as sync
        raise TypeError(f"reset_mask must be a bool array of shape ({num_envs},), got {mask!r}")
    if mask.shape != (num_envs,):
        raise ValueError(f"reset_mask must be a bool array of shape ({num_envs},), got {mask!r}")
    if not mask.any():
        raise ValueError("reset_mask must select at least one env")
    if not reset_once:
        raise ValueError("reset_mask resets some envs: reset() every env first")
    return mask


class SFMSNVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` SFMSN envs of one configuration, stepped together (module docstring).

    Args:
        num_envs: how many envs (at least 1).
        max_episode_steps: also truncate each episode after this many steps, as a
            ``TimeLimit`` would (``gymnasium.make_vec`` passes the one given to it; the
            registered ids set none); ``None``: at the horizon only, the env's own rule.
        copy: return fresh arrays every step (default); ``False`` returns the env's own
            buffers, which the next step overwrites (all but their static columns, which
            the steps leave as the reset wrote them: read them, do not write them).
        autoreset_mode: ``NEXT_STEP`` (the default, and the only mode here).
        **env_kwargs: the arguments of :class:`~mabp_gym.envs.env.SFMSNEnv`, the same for
            every env (``workload``, ``load``, ``nu``, ``obs_mode``, ...).
    """

    def __init__(
        self,
        num_envs: int,
        *,
        max_episode_steps: int | None = None,
        copy: bool = True,
        autoreset_mode: Any = None,
        **env_kwargs: Any,
    ) -> None:
        next_step = _AUTORESET.NEXT_STEP if _AUTORESET is not None else "NextStep"
        if autoreset_mode is not None and autoreset_mode not in (next_step, "NextStep"):
            raise ValueError(
                f"the batched vector env autoresets on the next step only, got autoreset_mode="
                f"{autoreset_mode!r}; for another mode use gymnasium.make_vec(..., "
                "vectorization_mode='sync', vector_kwargs={'autoreset_mode': ...})"
            )
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool)
            or not isinstance(max_episode_steps, (int, np.integer))
            or max_episode_steps < 1
        ):
            raise ValueError(
                f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}"
            )
        if env_kwargs.get("render_mode") is not None:
            raise ValueError(
                "the batched vector env does not render; use "
                "gymnasium.make_vec(..., vectorization_mode='sync') to render each env"
            )
        if not isinstance(copy, (bool, np.bool_)):
            raise ValueError(f"copy must be True or False, got {copy!r}")
        self.num_envs = int(num_envs)
        self.copy = bool(copy)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self._envs = [SFMSNEnv(**env_kwargs) for _ in range(self.num_envs)]
        self._stale = False  # whether the envs' slots and backlogs lag the stacked arrays
        first = self._envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata: dict[str, Any] = {
            "render_modes": [],
            "autoreset_mode": next_step,
        }
        self.render_mode = None
        workload = first.workload
        self._workload = workload
        self._generates = first.memory and not workload.fixed_memory
        core = CompiledTransition.shared(workload)
        self.compiled = (
            jit.COMPILED
            and not first.diagnostics
            and not first.sim.check_invariants
            and first._reward_fn is None  # a reward of your own: each env steps on its own
        )
        """Whether steps run the compiled batch (else each env steps on its own)."""
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self._truncated = np.zeros(self.num_envs, dtype=bool)  # the compiled step's
        self._all_active = np.ones(self.num_envs, dtype=bool)  # read only
        self._needs_reset = np.ones(self.num_envs, dtype=bool)
        self._every = False  # compiled, open, and no env resets next step: the short path
        self._reset_once = False
        if self.compiled:
            self._statics(core)
        self._buffers()

    # -- the stacked arrays ------------------------------------------------------------
    def _statics(self, core: CompiledTransition) -> None:
        """The workload's static arrays in the order the kernels take them."""
        ix, enc = self._workload.index, self.envs[0]._encoder
        self._statics_all = ((core.ints, core.floats), enc.kernel_statics, slotcore.radix_sort(ix))
        self._flags = (
            self.envs[0].memory,
            self._generates,
            bool(core.draws_in_kernel and self._generates),
            ix.score_slices[3].start,
            False,  # the observation's rows keep their static columns from the reset on
        )
        self._fill_flags = (*self._flags[:4], True)  # fresh arrays: every column

    def _buffers(self) -> None:
        """The stacked state, the kernels' outputs and the observation, one row per env."""
        n_envs, env = self.num_envs, self.envs[0]
        ix = self._workload.index
        state = env.sim.state
        self._state = StackedState(
            *(
                np.zeros((n_envs, *getattr(state, name).shape), dtype=getattr(state, name).dtype)
                for name in STATE_FIELDS
            )
        )
        self._fifo: tuple[np.ndarray, ...] = (
            free_rows(_OUT_ROWS, n_envs),  # pool
            np.full((n_envs, ix.num_pairs), -1, dtype=np.int64),  # head
            np.full((n_envs, ix.num_pairs), -1, dtype=np.int64),  # tail
            np.zeros((n_envs, 2), dtype=np.int64),  # meta
        )
        self._units = np.zeros(n_envs, dtype=np.int64)
        self._scores = np.zeros((n_envs, ix.num_scores))
        self._no_actions = no_actions()
        self._slots = slot_arrays(n_envs, ix, _OUT_ROWS)
        layout = env._encoder.layout
        # In the order of the Dict space's keys, as SyncVectorEnv and AsyncVectorEnv
        # return them (code that joins ``obs.values()`` gets one layout from any of them).
        order = getattr(self.single_observation_space, "spaces", layout)
        self._obs: dict[str, np.ndarray] = {
            key: np.zeros((n_envs, *layout[key].shape), dtype=layout[key].dtype) for key in order
        }
        # The static arrays are the same every step: filled once.
        first = env._encoder._observation(*[self._obs[key][0] for key in _DYNAMIC_KEYS])
        for key in _STATIC_KEYS:
            self._obs[key][:] = first[key]
        self._static_rows = {key: first[key].copy() for key in _STATIC_KEYS}
        self._dynamic = tuple(self._obs[key] for key in _DYNAMIC_KEYS)
        self._obs_specs = observation_specs(env._encoder, n_envs)
        self._lent = False  # whether the dynamic arrays were returned as they are
        self._rngs: Any = generators([env.sim.rng for env in self.envs]) if self.compiled else None
        self._kernel = jit.Typed(step_all)
        # The kernel's per-env arrival rates, backlogs and rewards, and the reward's weights.
        wl = self._workload
        drift = float(env.reward_kind == "drift_plus_penalty")
        weights = np.array([wl.theta, wl.omega, env.nu, env.reward_scale, drift], dtype=float)
        most = 2**62 if self.max_episode_steps is None else self.max_episode_steps
        limits = np.array([wl.horizon, most], dtype=np.int64)
        ends = (self._elapsed, self._truncated, weights, limits)
        self._episode = (np.zeros(n_envs), self._units, np.zeros(n_envs), *ends, *sum_scratch())

    def _bind(self, i: int) -> None:
        """Make env ``i``'s freshly reset state rows of the stacked arrays (its fifo is
        empty after a reset: its row of the pool starts as one free list)."""
        sim = self.envs[i].sim
        state = sim.state
        for name, stacked in zip(STATE_FIELDS, self._state, strict=True):
            stacked[i] = getattr(state, name)
            setattr(state, name, stacked[i])
        pool, head, tail, meta = self._fifo
        link_free(pool[i])
        meta[i] = (0, pool.shape[1])
        head[i] = -1
        tail[i] = -1
        self._rebind_fifo(i)
        self._slots.out.slot[i] = state.t
        self._units[i] = state.units
        if self.compiled:
            self._rngs[i] = sim.rng
        self._episode[0][i] = sim.workload.total_rate

    def __deepcopy__(self, memo: dict[int, Any]) -> SFMSNVectorEnv:
        """An independent copy that steps as this env would from here. An env's state and
        run-FIFO arrays are rows of the stacked arrays (views) from its reset on, which a
        plain deep copy turns into arrays of their own, and numba's list of the envs'
        generators does not copy: the copy's envs get rows of its own stacked arrays again
        wherever the original's are rows (an env stepped on its own may have grown its
        FIFO into an array of its own), and a list of their generators."""
        rows = [self._rows(i) for i in range(self.num_envs)]
        other = type(self).__new__(type(self))
        memo[id(self)] = other
        if self._stale:
            self._sync()  # the copies' envs get their slots and backlogs
        for name, value in vars(self).items():
            if name != "_rngs":
                setattr(other, name, copy.deepcopy(value, memo))
        if self.compiled:
            other._rngs = generators([env.sim.rng for env in other.envs])
        for i, bound in enumerate(rows):
            for k, (owner, name, stacked) in enumerate(other._row_owners(i)):
                if k in bound:
                    setattr(owner, name, stacked[i])
        return other

    def _row_owners(self, i: int) -> list[tuple[Any, str, np.ndarray]]:
        """Env ``i``'s arrays that can be rows of the stacked ones: (object, attribute,
        stacked array)."""
        state = self.envs[i].sim.state
        fifo = state.fifo
        return [
            (state, name, stacked) for name, stacked in zip(STATE_FIELDS, self._state, strict=True)
        ] + [
            (fifo, name, stacked)
            for name, stacked in zip(("pool", "head", "tail", "meta"), self._fifo, strict=True)
        ]

    def _rows(self, i: int) -> set[int]:
        """Which of env ``i``'s arrays (places in :meth:`_row_owners`) are rows of the
        stacked arrays now."""
        return {
            k
            for k, (owner, name, stacked) in enumerate(self._row_owners(i))
            if np.may_share_memory(getattr(owner, name), stacked)
        }

    def _rebind_fifo(self, i: int) -> None:
        fifo = cast(RunFifo, self.envs[i].sim.state.fifo)
        fifo.pool, fifo.head, fifo.tail, fifo.meta = (array[i] for array in self._fifo)

    def _grow_pool(self) -> None:
        """Twice the pool rows of every env (each env's new rows join its free list)."""
        pool, head, tail, meta = self._fifo
        old = pool.shape[1]
        bigger = grown(pool, 2 * old, meta)
        meta[:, 0] = old
        meta[:, 1] += old
        self._fifo = (bigger, head, tail, meta)
        for i in range(self.num_envs):
            self._rebind_fifo(i)

    def _grow_rows(self) -> None:
        """Twice the served-unit rows per env, keeping what the envs already served wrote."""
        self._slots = more_rows(self._slots, self._workload.index)

    # -- the Gymnasium API -------------------------------------------------------------
    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        self._require_open()
        seeds = env_seeds(seed, self.num_envs)
        mask = reset_mask(options, self.num_envs, self._reset_once)
        self._reclaim()  # before any env's state is a new episode's
        infos: dict[str, Any] = {}
        for i, env_seed in enumerate(seeds):
            if mask[i]:
                infos = self._reset_env(i, env_seed, infos)
        self._reset_once = True
        self._every = self.compiled and not self._needs_reset.any()
        return self._observation(), infos

    def _require_open(self) -> None:
        if self.closed:
            raise RuntimeError("the vector env is closed: make a new one")

    def _reset_env(self, i: int, seed: int | None, infos: dict[str, Any]) -> dict[str, Any]:
        obs, info = self.envs[i].reset(seed=seed)
        self._bind(i)
        self._write_obs(i, obs)
        self._elapsed[i] = 0
        self._needs_reset[i] = False
        return self._add_info(infos, info, i) if info else infos

    def _write_obs(self, i: int, obs: Any) -> None:
        env = self.envs[i]
        if env.obs_mode == "dict":
            for key, value in obs.items():
                self._obs[key][i] = value
        else:  # flat: the dict the env encoded it from
            for key, value in env._encoder.encode(env.sim.state).items():
                self._obs[key][i] = value

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._every:  # the common case: every env steps, none resets
            actions = checked_action(actions, "the action batch")
            if isinstance(actions, np.ndarray) and actions.shape == self._scores.shape:
                return self._step_every(actions)  # NaN and inf: the kernel refuses them
        self._require_open()
        if not self._reset_once:
            raise RuntimeError("call reset() before step()")
        scores, resetting = checked_scores(
            actions,
            self._needs_reset,
            self._workload.index.num_scores,
            out=self._scores,
            finite=not self.compiled,  # else the kernel refuses NaN and inf
        )
        return self.step_checked(scores, resetting)

    def step_checked(
        self, scores: np.ndarray, resetting: np.ndarray
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """:meth:`step` of what :func:`checked_scores` returned for this env's
        ``_needs_reset`` (the worker vector env checks a whole batch once, in its main
        process, before any block steps)."""
        every = not resetting.any()
        if every and self.compiled:
            return self._step_every(scores)
        self._reclaim()  # before any env's state is a new episode's
        infos: dict[str, Any] = {}
        active = self._all_active if every else ~resetting  # every env: whole rows, no masks
        stepping = every or active.any()
        if stepping and self.compiled:
            rewards = self._step_compiled(scores, active)[0]
            truncated = self._truncated.copy()
        else:
            rewards = np.zeros(self.num_envs)
            if stepping:
                infos = self._step_each(scores, active, rewards)
            truncated = self._truncation(active)
        if not every:
            for i in np.flatnonzero(resetting).tolist():
                infos = self._reset_env(i, None, infos)
        self._needs_reset = truncated.copy()
        self._every = self.compiled and not truncated.any()
        terminated = np.zeros(self.num_envs, dtype=bool)
        return self._observation(), rewards, terminated, truncated, infos

    def _step_every(
        self, scores: np.ndarray
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """A compiled step of every env, none resetting, on the batch's ``scores`` (float32
        or float64 of any layout, :meth:`_step_compiled`): :meth:`step_checked`'s short
        path, with as little Python as it takes."""
        if self.copy and self._envs[0].obs_mode == "dict":
            rewards, ends = self._step_compiled(
                scores, self._all_active, into=fresh_observation(self._obs_specs)
            )
            obs = returned_observation(self._obs, self._static_rows)
        else:
            rewards, ends = self._step_compiled(scores, self._all_active)
            obs = self._observation()
        return obs, rewards, *self._ended(ends), {}

    def step_into(
        self, scores: np.ndarray, into: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Where every env steps compiled and none resets, and the observation is a Dict:
        step them on ``scores`` (as :meth:`_step_every`) writing the observation's dynamic
        arrays (in ``DYNAMIC_KEYS``' order, every column) into ``into``, which the env then
        lends (the worker vector env's rows of the arrays it returns), and return the
        rewards and the truncations; else ``None``, and nothing is done."""
        if not self._every or self._envs[0].obs_mode != "dict":
            return None
        rewards, ends = self._step_compiled(scores, self._all_active, into=into)
        return rewards, self._ended(ends)[1]

    def _ended(self, ends: int) -> tuple[np.ndarray, np.ndarray]:
        """After a compiled step of every env: the terminations (none) and truncations,
        ``ends`` of them true (the envs then reset on the next step)."""
        truncated = self._truncated.copy()
        if ends:  # else ``_needs_reset`` stays all false
            self._needs_reset = truncated.copy()
            self._every = False
        return np.zeros(self.num_envs, dtype=bool), truncated

    def _truncation(self, active: np.ndarray) -> np.ndarray:
        """Which ``active`` envs' episodes end with the slot they just ran: at the horizon,
        or after ``max_episode_steps`` steps (the compiled step's rule, ``batch._tally``)."""
        self._elapsed[active] += 1
        truncated = (self._slots.out.slot >= self._workload.horizon) & active
        if self.max_episode_steps is not None:
            truncated |= (self._elapsed >= self.max_episode_steps) & active
        return truncated

    def _step_each(self, scores: np.ndarray, active: np.ndarray, rewards: np.ndarray) -> dict:
        """Every active env steps on its own (the path without the compiled batch)."""
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(active).tolist():
            env = self.envs[i]
            obs, rewards[i], _, _, info = env.step(scores[i])
            self._slots.out.slot[i] = env.sim.state.t
            self._write_obs(i, obs)
            if info:
                infos = self._add_info(infos, dict(info), i)
        return infos

    def _step_compiled(
        self, scores: np.ndarray, active: np.ndarray, into: tuple[np.ndarray, ...] | None = None
    ) -> tuple[np.ndarray, int]:
        """The active envs' slot in one compiled call (:attr:`_all_active` where every env
        steps); their rewards (0 for the others), and how many episodes end. The kernel
        reads C-contiguous, aligned and writable float64 or float32 ``scores`` as they are
        (float32 as ``actions``, widened env by env) and any other after a copy into
        :attr:`_scores`: it is typed for one layout of each.

        With ``into`` (new arrays of ``DYNAMIC_KEYS``, or rows of them), the kernel writes
        the observation's dynamic arrays whole there, and the env lends them (:attr:`_lent`):
        at 256 envs, copying the env's own arrays afterwards read them back from beyond the
        cache. Where the last step lent them, the env first observes into arrays of its own
        (:meth:`_reclaim`)."""
        env0 = self._envs[0]
        flags, before = self._flags, (self._dynamic, self._lent)
        if into is not None:
            flags = self._fill_flags
            self._own_dynamic(into)
            self._lent = True
        else:
            self._reclaim()
        actions = self._no_actions
        if scores.dtype == np.float32 and scores.flags.carray:
            scores, actions = self._scores, scores
        elif scores.dtype != np.float64 or not scores.flags.carray:
            self._scores[:] = scores
            scores = self._scores
        first = 0
        while True:
            args = self._arguments(first, active, scores, actions, flags)
            first, code, ends = self._kernel.call(args)
            if code == 0:
                break
            if code == -3:  # NaN or inf: no env stepped
                self._own_dynamic(before[0])
                self._lent = before[1]
                given = actions if actions.shape[0] else scores
                raise not_finite(~np.isfinite(given).all(axis=1) & active)
            if code == -4:  # env ``first``'s reward overflowed
                self._stale = True
                raise ValueError(
                    not_finite_reward(env0.reward_kind, env0.reward_scale, int(self._units[first]))
                )
            self._grow_rows() if code == -1 else self._grow_pool()
        if env0._encoder.long_laws:
            long_pressure(env0._encoder, self._slots.out, self._obs["service"])
        self._stale = True  # the envs' own slot and backlog: when they are asked for
        return self._episode[2].copy(), ends  # the rewards: the single env's floats

    def _arguments(
        self, first: int, active: np.ndarray, scores: np.ndarray, actions: np.ndarray, flags: Any
    ) -> tuple[Any, ...]:
        """:func:`step_all`'s arguments, stepping the active envs from env ``first`` on."""
        return (
            first,
            active,
            scores,
            actions,
            self._rngs,
            self._episode,
            flags,
            self._statics_all,
            tuple(self._state),
            self._fifo,
            self._slots.packed,
            self._dynamic,
        )

    def _reclaim(self) -> None:
        """Where the last step lent the observation's dynamic arrays to its caller, new
        ones of the env's own, written by the kernel observing every env again without
        stepping any (from env ``N`` on), before anything writes into them: the caller may
        have written into the lent ones (a copy of them would carry that into the rows of
        the envs a partial reset leaves)."""
        if not self._lent:
            return
        self._own_dynamic(fresh_observation(self._obs_specs))
        args = self._arguments(
            self.num_envs, self._all_active, self._scores, self._no_actions, self._fill_flags
        )
        self._kernel.call(args)  # observes only: no reward or truncation changes
        if self._envs[0]._encoder.long_laws:
            long_pressure(self._envs[0]._encoder, self._slots.out, self._obs["service"])

    def _own_dynamic(self, arrays: tuple[np.ndarray, ...]) -> None:
        """``arrays`` (in ``_DYNAMIC_KEYS``' order) as the observation's dynamic arrays,
        the env's own."""
        self._dynamic = arrays
        self._obs.update(zip(_DYNAMIC_KEYS, arrays, strict=True))
        self._lent = False

    def current_observation(self) -> Any:
        """The observation of the envs as they stand, as a step with ``copy=False``
        returns it (observed again where the last step lent its arrays: the worker vector
        env's rows of a reset that left this block's envs as they were)."""
        self._reclaim()
        return self._observation()

    def share_observations(self, arrays: dict[str, np.ndarray]) -> None:
        """Write the observation into ``arrays`` (one per key of the Dict observation, of
        the batch's shapes, e.g. rows of shared memory) from now on, instead of buffers of
        its own: with ``copy=False`` a step then returns them, and nothing is copied."""
        for key, array in arrays.items():
            array[...] = self._obs[key]
            self._obs[key] = array
        self._dynamic = tuple(self._obs[key] for key in _DYNAMIC_KEYS)
        self._lent = False
        self._kernel = jit.Typed(step_all)  # typed again: the arrays are the caller's

    @property
    def envs(self) -> list[SFMSNEnv]:
        """The single envs, their slot and backlog up to date (the compiled batch keeps
        them in its stacked arrays, and writes them back here when they are asked for)."""
        if self._stale:
            self._sync()
        return self._envs

    def _sync(self) -> None:
        """Write every env's slot and backlog from the stacked arrays into its state (an
        env that did not step writes back what it holds: its reset or its last slot)."""
        self._stale = False
        slot, units = self._slots.out.slot.tolist(), self._units.tolist()
        for env, t, backlog in zip(self._envs, slot, units, strict=True):
            env.sim.state.t, env.sim.state.units = t, backlog

    def _observation(self) -> Any:
        env = self._envs[0]
        if env.obs_mode == "dict":
            if self.copy:
                copies = {key: self._obs[key].copy() for key in _DYNAMIC_KEYS}
                return returned_observation(self._obs, self._static_rows, copies)
            return self._obs
        flat = np.concatenate(
            [self._obs[key].reshape(self.num_envs, -1) for key in FLAT_KEYS], axis=1
        ).astype(np.float32)
        mask = env.flat_layout["action_mask"][0]
        flat[:, : mask.start] = symlog(flat[:, : mask.start])
        return flat

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name``, as ``SyncVectorEnv.get_attr`` gives it: a method
        is called with no arguments, as there (:meth:`call`); the envs' states are rows of
        the batch's arrays, so what they read is current."""
        return self.call(name)

    UNCALLABLE = ("step", "reset", "close")
    """The env methods :meth:`call` refuses: the batch steps its envs' states itself, so an
    env stepped, reset or closed on its own would leave the batch behind (a ``step`` then
    hung inside the compiled step; a ``reset`` was not seen by the next batched step)."""

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name(*args, **kwargs)`` (its value, when not callable), as
        ``SyncVectorEnv.call`` does, except :data:`UNCALLABLE`, which are refused.

        Raises:
            AttributeError: ``name`` is one of :data:`UNCALLABLE`.
        """
        self._require_open()
        if name in self.UNCALLABLE:
            raise AttributeError(
                f"call({name!r}) is refused by the batched vector env: it steps its envs' "
                f"states itself; use its own {name}() (reset(options={{'reset_mask': mask}}) "
                "resets some envs), or gymnasium.make_vec(..., vectorization_mode='sync')"
            )
        values = (getattr(env, name) for env in self.envs)
        return tuple(v(*args, **kwargs) if callable(v) else v for v in values)

    def set_attr(self, name: str, values: Any) -> None:
        """Refused: the batched step reads its envs' settings once, when it is made, so a
        setting changed on an env would not reach it (``SyncVectorEnv`` allows it)."""
        raise AttributeError(
            f"set_attr({name!r}): the batched vector env reads its envs' settings when it is "
            "made; make a new one with the setting, or use "
            "gymnasium.make_vec(..., vectorization_mode='sync') to change envs in place"
        )

    def close_extras(self, **kwargs: Any) -> None:
        # Gymnasium's __del__ closes an env whose __init__ refused its arguments too.
        self._every = False  # a step after this one is refused
        for env in getattr(self, "envs", ()):
            env.close()
