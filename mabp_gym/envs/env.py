"""Gymnasium adapter over the simulator core: graph observations, projected score actions."""

from __future__ import annotations

import inspect
import math
import numbers
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mabp_gym.core.encoding import (
    DYNAMIC_KEYS,
    ArraySpec,
    ObservationEncoder,
    symlog,
)
from mabp_gym.core.kernels import batch, jit
from mabp_gym.core.kernels.batch import FusedStep
from mabp_gym.core.projection import validate_scores
from mabp_gym.core.simulator import Simulator, SlotOutcome
from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import is_workload_file, make_workload, workload_params
from mabp_gym.extras import has_extra, require

REWARDS = ("backlog", "drift_plus_penalty")
"""The built-in rewards; ``reward=`` also takes a :data:`RewardFn`."""
RewardFn = Callable[[SlotOutcome, np.ndarray, np.ndarray, float], float]
"""A reward of your own: ``fn(outcome, before, after, nu) -> float``, called after every
slot with the slot's :class:`~mabp_gym.core.simulator.SlotOutcome`, the backlog per admissible
pair (units in service included, ``(P,)`` int64) before and after the slot, and the env's
``nu``; the env divides the value by ``reward_scale``. ``backlog`` is
``lambda o, b, a, nu: -(o.backlog + nu * o.penalty)``."""
OBS_MODES = ("dict", "flat")
FLAT_KEYS = DYNAMIC_KEYS
"""The arrays of the ``obs_mode="flat"`` vector, in order: the observation less its static
parts (``edge_index``, ``edge_features`` and every ``*_index`` array)."""


def _reject_unknown_keywords(workload: Any, overrides: dict[str, Any]) -> None:
    """A keyword that is neither an env argument nor a parameter of the workload is a
    ``TypeError``, as Python raises for any unknown argument (wrappers such as TorchRL's
    ``GymEnv`` try ``frameskip=`` and fall back on exactly that)."""
    if isinstance(workload, Workload):
        unknown = sorted(set(overrides) - {"load"})
        if unknown:
            raise TypeError(
                f"SFMSNEnv.__init__() got an unexpected keyword argument {unknown[0]!r} (a "
                f"Workload object takes only load=: its other parameters are fixed in it; "
                f"build it with them, e.g. make_workload({workload.name!r}, "
                f"{unknown[0]}=...))"
            )
        return
    if isinstance(workload, str) and (workload == "file" or is_workload_file(workload)):
        allowed = {"load", "horizon", "path"}
    elif isinstance(workload, str):
        try:
            allowed = set(workload_params(workload))
        except ValueError:
            return  # an unknown workload name: make_workload explains it
    else:
        return
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise TypeError(
            f"SFMSNEnv.__init__() got an unexpected keyword argument "
            f"{unknown[0]!r} (neither an env argument nor a parameter of "
            f"workload {getattr(workload, 'name', workload)!r}; its parameters: "
            f"{sorted(allowed)})"
        )


def _load_interval(value: Any) -> tuple[float, float] | None:
    """``load=(low, high)``: the interval a load is drawn from at each reset (None for a
    plain number, which the workload builder validates)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, np.ndarray)):
        return None
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return None  # not an interval: the builder says what a load must be
    if len(value) != 2:
        raise ValueError(f"load: must be a number or an interval (low, high), got {value!r}")
    low = check_number(value[0], "load (low end of the interval)", low=0.0)
    high = check_number(value[1], "load (high end of the interval)", low=0.0)
    if low > high:
        raise ValueError(f"load: the interval (low, high) must have low <= high, got {value!r}")
    return low, high


DIAGNOSTIC_KEYS = (
    "arrivals",
    "served",
    "hits",
    "completed",
    "delays",
    "insertions",
    "evictions",
    "routed",
    "transfers",
    "work",
    "penalty",
    "penalty_compute",
    "penalty_transmission",
    "penalty_memory",
    "backlog",
    "control",
    "action_mask",
)
"""The step ``info`` of an env made with ``diagnostics=True`` (the default info is empty)."""


class SlimInfo(dict):
    """The step ``info`` of an env made without ``diagnostics``: an empty dict whose
    missing diagnostic keys say how to get them. Vector envs stack every info key of
    every step and SB3 deep-copies it, so the default carries nothing."""

    def __missing__(self, key: Any) -> Any:
        if key in DIAGNOSTIC_KEYS:
            raise KeyError(
                f"{key!r}: the step info is empty by default (vector envs and SB3 copy it "
                "every step); make the env with diagnostics=True for the slot's counts, "
                f"control and mask ({', '.join(DIAGNOSTIC_KEYS)})"
            )
        raise KeyError(key)


def observation_space(encoder: ObservationEncoder) -> spaces.Dict:
    """The ``spaces.Dict`` of an encoder's observation (one ``Box`` per array)."""
    return spaces.Dict({key: _box(spec) for key, spec in encoder.layout.items()})


def _box(spec: ArraySpec) -> spaces.Box:
    return spaces.Box(low=spec.low, high=spec.high, shape=spec.shape, dtype=spec.dtype)


def _built_workload(
    workload: Any, overrides: dict[str, Any]
) -> tuple[tuple[float, float] | None, Workload]:
    """The env's load interval (or None) and its workload, built from a name, a file or a
    ``Workload`` with ``overrides``. ``load=(low, high)`` builds at the low end (each
    episode draws its load at reset); the high end is validated here too, so an interval
    is refused at construction, not at some seed's reset."""
    interval = _load_interval(overrides.get("load"))
    if interval is not None:
        try:
            if isinstance(workload, str):
                make_workload(workload, **{**overrides, "load": interval[1]})
            elif isinstance(workload, Workload):
                workload.with_load(interval[1])
        except ValueError as error:
            raise ValueError(f"load interval {interval}, high end: {error}") from None
        overrides["load"] = interval[0]
    if isinstance(workload, Workload):
        load = overrides.pop("load", None)
        return interval, workload if load is None else workload.with_load(load)
    if isinstance(workload, str):
        return interval, make_workload(workload, **overrides)
    raise ValueError(
        f"workload must be a workload name, a workload file or a Workload, got {workload!r}"
    )


def _checked_reward(reward: Any) -> tuple[RewardFn | None, str]:
    """A reward function (and the kind ``"custom"``) or one of :data:`REWARDS` (and no
    function)."""
    if callable(reward):
        _check_reward_signature(reward)
        return reward, "custom"
    if not isinstance(reward, str) or reward not in REWARDS:
        raise ValueError(
            f"reward must be one of {REWARDS} or a function (outcome, before, after, nu) "
            f"-> float, got {reward!r}"
        )
    return None, reward


def _check_flags(workload: Workload, **flags: Any) -> None:
    """Each switch is a bool; ``memory`` names the builder's own memory parameter when the
    workload has one, which a user may have meant."""
    for name, flag in flags.items():
        if not isinstance(flag, (bool, np.bool_)):
            clash = name == "memory" and "memory" in dict(workload.params)
            raise ValueError(
                f"{name} must be True or False, got {flag!r}"
                + (
                    " (the env's switch of the memory system; the builder's own memory "
                    f"parameter of {workload.name!r} goes through "
                    f"workload=make_workload({workload.name!r}, memory=...))"
                    if clash
                    else ""
                )
            )


def _flat_layout(encoder: ObservationEncoder) -> dict[str, tuple[slice, tuple[int, ...]]]:
    """Where each of :data:`FLAT_KEYS` sits in the flat observation, and its shape."""
    layout = {}
    start = 0
    for key in FLAT_KEYS:
        shape = encoder.layout[key].shape
        size = int(np.prod(shape))
        layout[key] = (slice(start, start + size), shape)
        start += size
    return layout


class SFMSNEnv(gym.Env):
    """A stateful foundation-model service network (SFMSN) as a Gymnasium environment.

    ## Description
    Workers of an agentic LLM-serving network hold queues of requests and reusable
    execution memory under budgets (SPEC sections 1 and 2). Each step is one slot: the
    agent scores every candidate decision, the shared projection turns the scores into a
    feasible control, and the simulator executes it.

    ## Action Space
    ``Box(-1, 1, (D,), float32)``: one score per candidate, laid out
    ``[service (A) | route (R) | transfer (T) | retain (K)]``
    (``env.unwrapped.workload.index.score_slices``). Any finite array of shape ``(D,)`` is
    accepted: only order and sign matter (SPEC 3.2). Candidates with score > 0 act in
    descending score; negative retain scores drop objects. An all-negative vector is the
    legal idle action. NaN, inf or a wrong shape raise ``ValueError``.

    ## Observation Space
    A ``Dict`` of fixed-shape arrays (``N`` nodes, ``E`` links, ``C`` commodities, ``S``
    signatures); every ``*_index`` array is static and lets a model scatter candidates onto
    the graph:

    - ``node_features`` ``(N, 13)``: role one-hot, ``mu``, budget, memory used, backlog,
      unit in service, its residual work; ``edge_index`` ``(2, E)`` int64;
      ``edge_features`` ``(E, 3)``: capacity, cost ``d``, transfer bandwidth;
    - ``queues`` ``(N, C)`` (units in service included), ``memory`` ``(N, S)`` residency;
    - ``service`` ``(A, 5)``: current work, penalty, hit bit, successor pressure
      ``sum_c' P(c'|a, Y) Q_i^c'``, input queue; ``service_index`` ``(2, A)``: node,
      commodity;
    - ``route`` ``(R, 4)``: differential ``Q_i^c - Q_j^c``, cost, whether the destination
      holds memory compatible with the commodity, source queue; ``route_index`` ``(2, R)``:
      link, commodity;
    - ``transfer`` ``(T, 3)``: source holds, size, destination free budget;
      ``transfer_index`` ``(2, T)``: link, signature;
    - ``retain`` ``(K, 3)``: held, size, queued demand of compatible commodities at the
      node; ``retain_index`` ``(2, K)``: node, signature;
    - ``action_mask`` ``(D,)`` int8: candidates that can act now.

    ## Rewards
    ``reward="backlog"`` (default): ``-(||Q(t+1)||_1 + nu h(t)) / reward_scale``;
    ``reward="drift_plus_penalty"``: ``-(L(Q(t+1)) - L(Q(t)) + nu h(t)) / reward_scale``
    with ``L(Q) = sum Q^2 / 2``. ``h(t)`` is the slot's penalty (SPEC 1 step 9). Or a
    function of your own (:data:`RewardFn`): ``reward=fn`` with ``fn(outcome, before,
    after, nu) -> float`` (the slot's outcome and the backlog per pair before and after
    it), divided by ``reward_scale``; a value that is not a finite real number raises
    ``ValueError``. The function runs after the slot: if it raises, the slot has happened
    (reset the env before stepping on).

    ## Episode End
    Never terminates; truncates after ``horizon`` slots (600 by default), the env's one
    truncation rule: the registered ids set no ``max_episode_steps``, so
    ``gymnasium.make(id, horizon=H)`` runs ``H`` slots. Passing ``max_episode_steps`` to
    ``make`` adds Gymnasium's ``TimeLimit`` as well, which then cuts at the smaller.

    ## Arguments
    ``workload`` (a name of :data:`mabp_gym.WORKLOADS` or a :class:`Workload`), ``nu``
    (penalty weight, 5), ``memory`` (``False``: the no-memory system), ``reward``,
    ``reward_scale`` (100), ``check_invariants`` (assert SPEC 6 every slot), ``render_mode``
    (``"ansi"`` or ``"rgb_array"``) and every workload parameter (``load``, ``beta``,
    ``K``, ``eps``, ``horizon``, ...; see :func:`mabp_gym.workload_params`).

    ``load`` may also be an interval ``(low, high)``: each reset draws the episode's load
    uniformly from it with the env's seeded generator (``reset(seed=s)`` fixes it), and
    the reset ``info`` reports it as ``info["load"]``. Training over a range of loads
    keeps a policy from learning one operating point only.

    ``obs_mode="flat"`` (default ``"dict"``) gives one ``Box((F,), float32)`` vector for
    libraries whose default encoders take a single array (RLlib): the arrays of
    :data:`FLAT_KEYS` raveled in that order, every entry but the 0/1 ``action_mask``
    symlog-scaled (``sign(x) log(1 + |x|)``); the static arrays (``edge_index``,
    ``edge_features``, every ``*_index``) are left out. ``env.unwrapped.flat_layout``
    maps each key to its ``(slice, shape)`` in the vector.

    Vector envs: ``gymnasium.make_vec(id, num_envs)`` builds the batched vector env
    (:class:`mabp_gym.envs.vector_env.SFMSNVectorEnv`: every env's slot in one compiled call,
    the same observations and rewards as single envs, ``NEXT_STEP`` autoreset);
    ``vectorization_mode="sync"`` or ``"async"`` give Gymnasium's own, which declare
    ``metadata["autoreset_mode"]`` (``NEXT_STEP`` by default; ``SAME_STEP`` via
    ``vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}``, from
    Gymnasium 1.1).

    ``diagnostics=True`` (default ``False``): the step ``info`` holds the slot's counts
    (``arrivals``, ``served``, ``hits``, ``completed``, ``delays``, ``insertions``,
    ``evictions``, ``penalty`` and its ``penalty_compute`` / ``penalty_transmission`` /
    ``penalty_memory`` split, ``backlog``), the executed ``control`` (a dict of the
    :class:`~mabp_gym.Control` arrays, with ``transfers`` as a ``(T,)`` indicator of the
    executed transfer candidates) and the ``action_mask`` (:data:`DIAGNOSTIC_KEYS`), and
    the reset ``info`` the ``action_mask``. Without it the step info is empty (a
    :class:`SlimInfo`, whose missing diagnostic keys say how to get them): vector envs
    and SB3 stack and copy every info key of every step, so the default costs them
    nothing. The reset info holds ``load`` when the load is an interval.

    ## Version History
    - v0: initial version.
    """

    # rgb_array draws with matplotlib (extra ``plot``): advertised only where it is installed.
    metadata = {
        "render_modes": ["ansi", *(["rgb_array"] if has_extra("plot") else [])],
        "render_fps": 4,
    }

    compile_after = 5_000
    """Training steps (of every env of the process) taken with the simulator's kernels one
    by one before the single compiled step is compiled, unless numba's disk cache already
    holds it: compiling it costs about 15 s once per install (then 40% less time a step),
    which a short run or a test should not pay."""

    def __init__(
        self,
        workload: str | Workload = "mixed",
        *,
        nu: float = 5.0,
        memory: bool = True,
        reward: str | RewardFn = "backlog",
        reward_scale: float = 100.0,
        check_invariants: bool = False,
        render_mode: str | None = None,
        obs_mode: str = "dict",
        diagnostics: bool = False,
        **workload_overrides: Any,
    ) -> None:
        if isinstance(workload, os.PathLike):  # a workload file
            workload = os.fspath(workload)
        _reject_unknown_keywords(workload, workload_overrides)
        if not isinstance(obs_mode, str) or obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        self.load_interval, self.workload = _built_workload(workload, workload_overrides)
        self._reward_fn, reward = _checked_reward(reward)
        check_number(nu, "nu", low=0.0)
        check_number(reward_scale, "reward_scale", low=0.0, low_open=True)
        _check_flags(
            self.workload, memory=memory, check_invariants=check_invariants, diagnostics=diagnostics
        )
        if render_mode == "rgb_array":
            require("plot", 'render_mode="rgb_array"')
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or "
                f"None, got {render_mode!r}"
            )
        self.nu = float(nu)
        self.memory = bool(memory)
        self.diagnostics = bool(diagnostics)
        self.reward_kind = reward
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.horizon = self.workload.horizon
        self.sim = Simulator(self.workload, memory=self.memory, check_invariants=check_invariants)
        self._encoder = ObservationEncoder(self.workload, memory=self.memory)
        ix = self.workload.index
        self.action_space = spaces.Box(-1.0, 1.0, (ix.num_scores,), dtype=np.float32)
        self.obs_mode = obs_mode
        self._base_workload = self.workload
        if obs_mode == "flat":
            self.flat_layout = _flat_layout(self._encoder)
            size = sum(part.stop - part.start for part, _ in self.flat_layout.values())
            self.observation_space = spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)
        else:
            self.observation_space = observation_space(self._encoder)
        self._last: SlotOutcome | None = None
        # Whether a step may skip the slot's SlotOutcome: nothing reads it.
        self._lean = not self.diagnostics and self._reward_fn is None and render_mode is None
        # ... and whether the slot and observation then run as one compiled call.
        self._fused_ok = self._lean and jit.COMPILED and not check_invariants
        self._fused: FusedStep | None = None

    # ----------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray] | np.ndarray, dict[str, Any]]:
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {options!r}")
        if options:  # before the seed: a refused reset changes nothing
            raise ValueError(f"options are not supported, got {sorted(options)}")
        super().reset(seed=seed)
        info: dict[str, Any] = {}
        if self.load_interval is not None:
            # Drawn first, from the env's generator: reset(seed) fixes the load too. Only
            # the arrival rate depends on the load, so the encoder and spaces stay.
            load = float(self.np_random.uniform(*self.load_interval))
            self.workload = self._base_workload.with_load(load)
            self.sim = Simulator(
                self.workload, memory=self.memory, check_invariants=self.sim.check_invariants
            )
            info["load"] = load
        # The simulator owns its own generator, seeded from the env's so that reset(seed)
        # fixes the episode and reset() continues a reproducible stream. With a seed both
        # start from it, so np_random repeats the simulator's draws (docs/learning.md);
        # deriving another seed would change every seeded episode of the results.
        sim_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        self.sim.reset(sim_seed)
        self._last = None
        self._fused = None  # bound to the episode's state and generator
        obs = self._encoder.encode(self.sim.state)
        if self.diagnostics:
            info["action_mask"] = obs["action_mask"].astype(bool)
        return self._observe(obs), info

    def _observe(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | np.ndarray:
        """The observation in the env's ``obs_mode``."""
        if self.obs_mode == "dict":
            return obs
        flat = np.concatenate([obs[key].ravel() for key in FLAT_KEYS]).astype(np.float32)
        # Symlog every array but the 0/1 mask, so that default MLP encoders see O(1) inputs.
        mask = self.flat_layout["action_mask"][0]
        flat[: mask.start] = symlog(flat[: mask.start])
        return flat

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray] | np.ndarray, float, bool, bool, dict[str, Any]]:
        # The scores are checked (real numbers, shape, finite) once, before anything changes.
        scores = validate_scores(self.workload, action, "the action")
        if self._lean:
            return self._step_lean(scores)
        state = self.sim.state
        before = (
            _lyapunov(state, self.workload) if self.reward_kind == "drift_plus_penalty" else 0.0
        )
        if self._reward_fn is not None:
            pairs = state.backlog_pairs(self.workload)
        control, outcome = self.sim.step_scores(scores)
        self._last = outcome
        if self._reward_fn is not None:
            reward = self._custom_reward(outcome, pairs) / self.reward_scale
        else:
            reward = self._reward(outcome.penalty, outcome.backlog, before)
        obs = self._encoder.encode(self.sim.state)
        truncated = self.sim.state.t >= self.horizon
        if not self.diagnostics:
            return self._observe(obs), float(reward), False, bool(truncated), SlimInfo()
        info = {
            "arrivals": outcome.arrivals,
            "served": outcome.served,
            "hits": outcome.hits,
            "completed": outcome.completed,
            "delays": outcome.delays,
            "insertions": outcome.insertions,
            "evictions": outcome.evictions,
            "routed": outcome.routed,
            "transfers": outcome.transfers,
            "work": outcome.work,
            "penalty": outcome.penalty,
            "penalty_compute": outcome.penalty_compute,
            "penalty_transmission": outcome.penalty_transmission,
            "penalty_memory": outcome.penalty_memory,
            "backlog": outcome.backlog,
            "control": self._control_info(control),
            "action_mask": obs["action_mask"].astype(bool),
        }
        return self._observe(obs), float(reward), False, bool(truncated), info

    def __getstate__(self) -> dict[str, Any]:
        # The fused step holds compiled-code objects (numba's typed list of the generator):
        # it is not pickled (nor deep-copied) but rebuilt on the next step from the state.
        state = self.__dict__.copy()
        state["_fused"] = None
        return state

    def _step_lean(
        self, scores: np.ndarray
    ) -> tuple[dict[str, np.ndarray] | np.ndarray, float, bool, bool, dict[str, Any]]:
        """:meth:`step` where nothing needs the slot's :class:`SlotOutcome` (no diagnostics,
        a built-in reward, no render): the same slot, observation and reward."""
        drift = self.reward_kind == "drift_plus_penalty"
        before = _lyapunov(self.sim.state, self.workload) if drift else 0.0
        if self._fused_ok and (self._fused is not None or WARMUP.due(self.compile_after)):
            self.sim._require_reset()
            if self._fused is None or not self._fused.bound_to(self.sim):
                self._fused = FusedStep(self.sim, self._encoder)
            penalty, backlog = self._fused.step(scores)
            obs = self._fused.observation()
        else:
            penalty, backlog = self.sim.step_checked_scores(scores)
            obs = self._encoder.encode(self.sim.state)
        reward = self._reward(penalty, backlog, before)
        truncated = self.sim.state.t >= self.horizon
        return self._observe(obs), reward, False, bool(truncated), SlimInfo()

    def _reward(self, penalty: float, backlog: int, before: float) -> float:
        """A built-in reward of the slot just run: ``backlog`` (the backlog after it) or
        ``drift_plus_penalty`` (the Lyapunov drift from ``before``), plus ``nu`` times its
        penalty, scaled."""
        cost = self.nu * penalty
        if self.reward_kind == "backlog":
            value = float(-(backlog + cost) / self.reward_scale)
        else:
            drift = _lyapunov(self.sim.state, self.workload) - before
            value = float(-(drift + cost) / self.reward_scale)
        if not math.isfinite(value):
            raise ValueError(not_finite_reward(self.reward_kind, self.reward_scale, backlog))
        return value

    def _custom_reward(self, outcome: SlotOutcome, before: np.ndarray) -> float:
        assert self._reward_fn is not None
        after = self.sim.state.backlog_pairs(self.workload)
        value = self._reward_fn(outcome, before, after, self.nu)
        name = getattr(self._reward_fn, "__name__", self._reward_fn)
        number = _real(value)
        if number is None:
            raise ValueError(
                f"the reward function {name!r} must return a real number (a float, an int, "
                f"or a numpy or torch scalar), got {value!r}"
            )
        if not math.isfinite(number):
            raise ValueError(
                f"the reward function {name!r} returned {value!r} at slot {outcome.t}: rewards "
                "must be finite floats"
            )
        return number

    def _control_info(self, control) -> dict[str, np.ndarray]:
        # Fixed shapes, so that vector envs can stack infos: executed transfers become a
        # (T,) indicator over the transfer candidates.
        executed = np.zeros(self.workload.index.num_transfers, dtype=bool)
        executed[control.transfers] = True
        return {**control.as_dict(), "transfers": executed}

    # ----------------------------------------------------------------------------------
    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            from mabp_gym.core.render import render_ansi

            return render_ansi(self.workload, self.sim.state, self._last)
        if self.render_mode == "rgb_array":
            from mabp_gym.core.render import render_rgb

            return render_rgb(self.workload, self.sim.state)
        return None


def _real(value: Any) -> float | None:
    """``value`` as a float where it is one real number (a Python or numpy number, a 0-d
    array, a CPU torch scalar), else None (bools, complex numbers, strings, arrays)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if not isinstance(value, numbers.Real):
        try:
            value = np.asarray(value)
        except Exception:  # noqa: BLE001 - anything numpy cannot read is no number
            return None
        if value.shape != () or value.dtype.kind not in "iuf":
            return None
    try:
        return float(value)
    except (OverflowError, TypeError, ValueError):
        return math.nan


def _check_reward_signature(fn: Callable[..., Any]) -> None:
    """Refuse, at construction, a reward function that cannot take the four arguments."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: its call will tell
        return
    try:
        signature.bind(None, None, None, None)
    except TypeError:
        raise ValueError(
            f"reward function {getattr(fn, '__name__', fn)!r} must take (outcome, before, "
            f"after, nu), got the signature {signature}"
        ) from None


WARMUP = jit.Warmup(batch.step_all)
"""When a training step becomes the one compiled call (:class:`FusedStep`): at once where
it is on disk, else after ``compile_after`` steps of the process taken one kernel at a
time."""


def not_finite_reward(kind: str, scale: float, backlog: Any) -> str:
    """The error of a built-in reward that overflowed its float."""
    return (
        f"the {kind} reward overflowed at a backlog of {backlog} units with "
        f"reward_scale={scale!r}: use a scale near the backlog's size (the default is 100)"
    )


def _lyapunov(state, workload: Workload) -> float:
    backlog = state.backlog_pairs(workload).astype(np.float64)
    return 0.5 * float(backlog @ backlog)
