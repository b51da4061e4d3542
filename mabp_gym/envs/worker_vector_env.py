"""The batched vector env over several processes: ``N`` envs stepped by ``P`` processes,
each stepping its share with one :class:`~mabp_gym.envs.vector_env.SFMSNVectorEnv` (the
EnvPool / PufferLib pattern), so that a step uses ``P`` cores.

``gymnasium.make_vec(id, num_envs=N, workers=P)`` builds it for every SFMSN id (``workers=1``,
the default, is the in-process batched env). The envs are cut into ``P`` contiguous blocks:
``P - 1`` worker processes step the first ones and this process steps the last (smaller:
:data:`MAIN_SHARE`, :data:`MAIN_SHARE_FRESH`) while they do. The actions, observations,
rewards and truncations travel through shared memory, and only the command and the
(usually empty) info dict through a pipe. Env ``i`` is seeded ``seed + i`` and steps
exactly as env ``i`` of one batched env, and so as a single env with that seed
(``tests/test_vector_env.py`` compares them step by step).

Actions are checked in this process before any worker steps, so a refused batch changes no
env. A worker that fails raises here with the worker's message; one that dies closes the
vector env with an error naming it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import multiprocessing.connection
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from mabp_gym.core.encoding import DYNAMIC_KEYS
from mabp_gym.core.kernels.batch import fresh_observation, observation_specs
from mabp_gym.envs.vector_env import (
    SFMSNVectorEnv,
    checked_scores,
    env_seeds,
    reset_mask,
    returned_observation,
    sum_is_finite,
)

START_METHODS = ("fork", "forkserver", "spawn")
"""The ``context`` values: multiprocessing's start methods (``None``: its default)."""


def batched_vector_env(num_envs: int, *, workers: int = 1, **kwargs: Any) -> gym.vector.VectorEnv:
    """The SFMSN ids' vector entry point: the batched env in this process (``workers=1``)
    or over ``workers`` processes (:class:`SFMSNWorkerVectorEnv`)."""
    _check_workers(workers, num_envs)
    if workers == 1:
        if kwargs.pop("context", None) is not None:
            raise ValueError(
                "context (the worker processes' start method) needs workers >= 2, got "
                f"workers={workers}"
            )
        return SFMSNVectorEnv(num_envs, **kwargs)
    return SFMSNWorkerVectorEnv(num_envs, workers=workers, **kwargs)


def _check_workers(workers: Any, num_envs: Any) -> None:
    whole = isinstance(num_envs, (int, np.integer)) and not isinstance(num_envs, bool)
    if whole and num_envs < 1:  # first: a user who passed no workers reads about num_envs
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if whole and workers > num_envs:
        raise ValueError(
            f"workers ({workers}) must be at most num_envs ({num_envs}): each worker "
            "steps at least one env"
        )


MAIN_SHARE = 15 / 16
"""The main process's block against an even share of the envs: it also checks the actions
and sends the commands (and copies the workers' rows of a flat observation out), so it
steps a little fewer (at 256 envs over 2 processes 120 against 136: 1.58x one process's
env steps/s against 1.54x for 128 each; at 64 envs 1.38x against 1.32x; at 1,024 within
the noise; benchmarks/RESULTS.md)."""

MAIN_SHARE_FRESH = 0.86
""":data:`MAIN_SHARE` where each step returns new arrays of a Dict observation
(``copy=True``): the main process then also makes those arrays while the workers step
(about a millisecond at 1,024 envs), and steps fewer envs still (benchmarks/RESULTS.md)."""


def _blocks(num_envs: int, workers: int, share: float = MAIN_SHARE) -> list[tuple[int, int]]:
    """Each process's ``(first env, number of envs)``, contiguous: the worker processes'
    sizes within one of each other, the main process's (the last block) about ``share``
    of an even share, at least one env."""
    main = max(1, int(num_envs / workers * share))
    rest, others = num_envs - main, workers - 1
    sizes = [rest // others + (j < rest % others) for j in range(others)] + [main]
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    return list(zip(firsts, sizes, strict=True))


class _Shared:
    """Arrays in shared memory, one per name, each with a row per env."""

    def __init__(self, context: Any, layout: dict[str, tuple[tuple[int, ...], Any]]) -> None:
        self.layout = layout
        self.raw = {
            name: context.RawArray(
                ctypes.c_byte, max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
            )
            for name, (shape, dtype) in layout.items()
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """Numpy views of the shared arrays (in whichever process holds this object)."""
        return {
            name: np.frombuffer(self.raw[name], dtype=dtype, count=int(np.prod(shape))).reshape(
                shape
            )
            for name, (shape, dtype) in self.layout.items()
        }


class _Block:
    """One block of envs in one batched env, answering the vector env's commands (in a
    worker process, or in the main one).

    A worker's block writes its rows of the shared arrays. The main process's block
    (``in_process``) writes its rows of the observation straight into the arrays the
    vector env returns (``target``: new ones with ``copy=True``, the shared ones else);
    in the common step (every env steps, none resets, a Dict observation) its kernel
    writes them there itself (:meth:`SFMSNVectorEnv.step_into`)."""

    def __init__(
        self, block: tuple[int, int], settings: dict, shared: _Shared, in_process: bool = False
    ) -> None:
        first, count = block
        self.rows = slice(first, first + count)
        self.vec = SFMSNVectorEnv(count, copy=False, **settings)
        self.arrays = shared.arrays()
        self.dict = self.vec.envs[0].obs_mode == "dict"
        if self.dict:
            keys = [key for key in self.arrays if key not in _NOT_OBS]
            rows = {key: self.arrays[key][self.rows] for key in keys}
            if in_process:  # the static keys' rows, which no step writes
                for key in keys:
                    rows[key][...] = self.vec._obs[key]
            else:  # a Dict observation is written straight into the shared rows
                self.vec.share_observations(rows)

    def handle(self, command: str, argument: Any) -> tuple[str, Any]:
        """``("ok", value)``, or ``("error", (type name, message))``."""
        try:
            if command == "step":
                return "ok", self._step(argument)
            if command == "reset":
                kwargs, target = argument if isinstance(argument, tuple) else (argument, None)
                info: dict[str, Any] = {}
                if kwargs is None:  # the main process's block, whose envs all keep on
                    obs = self.vec.current_observation()
                else:
                    obs, info = self.vec.reset(**kwargs)
                self._write(obs, target)
                return "ok", info
            if command == "get_attr":
                return "ok", self.vec.get_attr(argument)
            if command == "call":
                name, args, kwargs = argument
                return "ok", self.vec.call(name, *args, **kwargs)
            if command == "close":
                self.vec.close()
                return "ok", None
            return "error", ("ValueError", f"unknown command {command!r}")
        except Exception as error:
            return "error", (type(error).__name__, str(error))

    def _step(self, argument: Any) -> dict:
        """A step on scores checked whole by the main process: a worker's ``argument`` names
        the shared array of them, the main process's is ``(its rows, target)``."""
        vec, arrays, rows = self.vec, self.arrays, self.rows
        if isinstance(argument, str):
            scores, target = arrays[argument][rows], None
        else:
            scores, target = argument
        stepped = None if target is None else vec.step_into(scores, target)  # None: flat
        info: dict[str, Any] = {}
        if stepped is not None:
            rewards, truncated = stepped
        else:
            resetting = vec._needs_reset.copy()
            if resetting.any():
                scores = np.where(resetting[:, None], 0.0, scores)
            obs, rewards, _, truncated, info = vec.step_checked(scores, resetting)
            self._write(obs, target)
        arrays["rewards"][rows] = rewards
        arrays["terminated"][rows] = False
        arrays["truncated"][rows] = truncated
        return info

    def _write(self, obs: Any, target: tuple[np.ndarray, ...] | None) -> None:
        """The block's observation into ``target`` (the main process's block: the
        dynamic arrays' rows, in ``DYNAMIC_KEYS``' order, or the flat array's), or into
        its rows of the shared flat array (a worker's; a Dict one is there already)."""
        if target is None:
            if not self.dict:
                self.arrays["obs"][self.rows] = obs
        elif self.dict:
            for key, array in zip(DYNAMIC_KEYS, target, strict=True):
                array[...] = obs[key]
        else:
            target[0][...] = obs


def _worker(
    pipe: Any, parent_end: Any, block: tuple[int, int], settings: dict, shared: _Shared
) -> None:
    """A worker process's loop: one :class:`_Block`, commands from ``pipe``."""
    parent_end.close()
    try:
        envs = _Block(block, settings, shared)
    except Exception as error:  # the main process made the same env first: unexpected
        pipe.send(("error", (type(error).__name__, str(error))))
        return
    pipe.send(("ok", None))
    gap = 1.0  # the last wait for a command
    while True:
        try:
            started = time.perf_counter()
            _wait(pipe, _spin(gap))
            command, argument = pipe.recv()
            gap = time.perf_counter() - started
        except (EOFError, OSError):  # the main process went without closing: nothing to do
            return
        answer = envs.handle(command, argument)
        try:
            pipe.send(answer)
        except (EOFError, OSError):
            return
        except Exception as error:  # a get_attr or call value that does not pickle
            message = f"{command}'s value does not pickle: {type(error).__name__}: {error}"
            pipe.send(("error", ("PicklingError", message)))  # raised as RuntimeError
        if command == "close":
            return


SPIN_S = 3e-4
"""How long a process polls for a message before it blocks (waking a process blocked on a
pipe costs about 50-100 us here, a step of 16 envs about 500)."""
SPIN_MAX_S = 2e-3
"""The longest a worker polls for its next command."""


def _spin(gap: float) -> float:
    """How long a worker polls for its next command, given how long it waited for the
    last: a little longer than that where it was under :data:`SPIN_MAX_S` (steps back to
    back: at 256 envs the main process copies the observation out and checks the next
    actions in about 0.4 ms, and a worker that blocked meanwhile wakes late), else
    :data:`SPIN_S` (a policy runs between steps, and polling would take a core from it)."""
    if gap >= SPIN_MAX_S:
        return SPIN_S
    return min(max(1.5 * gap, SPIN_S), SPIN_MAX_S)


def _wait(pipe: Any, spin_s: float = SPIN_S) -> None:
    """Wait for ``pipe`` to have a message: polling for ``spin_s`` first, then blocking."""
    deadline = time.perf_counter() + spin_s
    while not pipe.poll():
        if time.perf_counter() > deadline:
            pipe.poll(None)
            return


class _InProcess:
    """The main process's block behind a pipe's ``send`` / ``recv``: a command runs when
    it is sent (after the workers' were: the main process steps its block while they
    step theirs)."""

    def __init__(self, envs: _Block) -> None:
        self.envs = envs
        self.answer: tuple[str, Any] = ("ok", None)

    def send(self, message: tuple[str, Any]) -> None:
        self.answer = self.envs.handle(*message)

    def recv(self) -> tuple[str, Any]:
        return self.answer

    def poll(self, timeout: float = 0.0) -> bool:
        return True

    def close(self) -> None:
        pass


_SKIP = "skip"  # no message for this worker
_NOT_OBS = ("actions", "actions32", "rewards", "terminated", "truncated")
_ERRORS = {
    error.__name__: error
    for error in (ValueError, TypeError, RuntimeError, AttributeError, KeyError)
}


class SFMSNWorkerVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` SFMSN envs over ``workers`` processes (module docstring).

    Args:
        num_envs: how many envs (at least ``workers``).
        workers: how many processes step them, this one included (at least 2;
            ``make_vec(..., workers=1)`` gives the in-process batched env).
        context: the multiprocessing start method, one of :data:`START_METHODS`, or
            ``None`` for multiprocessing's default (as Gymnasium's ``AsyncVectorEnv``).
        copy: return fresh arrays every step (default); ``False`` returns the shared
            buffers, which the next step overwrites.
        max_episode_steps, autoreset_mode, **env_kwargs: as for
            :class:`~mabp_gym.envs.vector_env.SFMSNVectorEnv`.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        workers: int = 2,
        context: str | None = None,
        copy: bool = True,
        max_episode_steps: int | None = None,
        autoreset_mode: Any = None,
        **env_kwargs: Any,
    ) -> None:
        self._processes: list[Any] = []
        self._pipes: list[Any] = []
        # One env in this process checks every argument before any worker starts, and
        # gives the spaces and the observation's layout.
        prototype = SFMSNVectorEnv(
            1,
            max_episode_steps=max_episode_steps,
            copy=copy,
            autoreset_mode=autoreset_mode,
            **env_kwargs,
        )
        prototype.close()
        _check_workers(workers, num_envs)
        if workers < 2:
            raise ValueError(
                f"workers must be at least 2 for the worker vector env, got {workers}; "
                "gymnasium.make_vec(..., workers=1) gives the in-process batched env"
            )
        if context is not None and context not in START_METHODS:
            raise ValueError(f"context must be None or one of {START_METHODS}, got {context!r}")
        self.num_envs, self.workers, self.copy = int(num_envs), int(workers), bool(copy)
        self.single_observation_space = prototype.single_observation_space
        self.single_action_space = prototype.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(prototype.metadata)
        self.render_mode = None
        self.max_episode_steps = prototype.max_episode_steps
        self._num_scores = prototype._workload.index.num_scores
        self._needs_reset = np.ones(self.num_envs, dtype=bool)
        self._reset_once = False
        self._start(prototype, context, max_episode_steps, env_kwargs)

    def _start(self, prototype: SFMSNVectorEnv, context: Any, steps: Any, env_kwargs: dict) -> None:
        """The shared arrays and the worker processes, each ready before this returns."""
        n = self.num_envs
        obs_layout: dict[str, tuple[tuple[int, ...], Any]]
        if prototype.envs[0].obs_mode == "flat":
            width = prototype.single_observation_space.shape
            assert width is not None
            obs_layout = {"obs": ((n, *width), np.float32)}
        else:
            obs_layout = {
                key: ((n, *buf.shape[1:]), buf.dtype) for key, buf in prototype._obs.items()
            }
        layout: dict[str, tuple[tuple[int, ...], Any]] = {
            **obs_layout,
            "actions": ((n, self._num_scores), np.float64),
            "actions32": ((n, self._num_scores), np.float32),  # float32 batches, as given
            "rewards": ((n,), np.float64),
            "terminated": ((n,), np.bool_),
            "truncated": ((n,), np.bool_),
        }
        ctx = multiprocessing.get_context(context)
        # Garbage of this process's (an env closed but in a reference cycle) would be
        # shared with forked workers, and its pages copied one by one as this process
        # reuses them: at 1,024 envs after a closed one-process env, 1.5x slower steps.
        gc.collect()
        self._shared = _Shared(ctx, layout)
        self._arrays = self._shared.arrays()
        self._obs_keys = tuple(obs_layout)
        self._dict = self._obs_keys != ("obs",)
        if self._dict:  # for the arrays a step returns with copy=True
            self._obs_specs = observation_specs(prototype.envs[0]._encoder, n)
            self._static_rows = prototype._static_rows
        settings = {"max_episode_steps": steps, **env_kwargs}
        fresh = self.copy and self._dict
        self._blocks = _blocks(n, self.workers, MAIN_SHARE_FRESH if fresh else MAIN_SHARE)
        # Workers 0 .. P-2 are processes; the last block steps in this process.
        for block in self._blocks[:-1]:
            parent_end, child_end = ctx.Pipe()
            process = ctx.Process(
                target=_worker,
                args=(child_end, parent_end, block, settings, self._shared),
                daemon=True,
                name=f"mabp_gym worker {len(self._processes)}",
            )
            process.start()
            child_end.close()
            self._processes.append(process)
            self._pipes.append(parent_end)
        main = _Block(self._blocks[-1], settings, self._shared, in_process=True)
        self._pipes.append(_InProcess(main))
        self._gather()

    # -- messages ----------------------------------------------------------------------
    def _send(self, command: str, arguments: list[Any] | None = None) -> list[Any]:
        """Send ``command`` to the workers (one argument each, or ``None`` for all of them;
        a worker whose argument is ``_SKIP`` gets nothing and answers ``{}``), and return
        their answers in order."""
        return self._gather(*self._post(command, arguments))

    def _post(self, command: str, arguments: list[Any] | None = None) -> tuple[list[int], set[int]]:
        """Send ``command`` (as :meth:`_send`) without waiting for the answers: the workers
        that got it and those whose pipe is gone, for :meth:`_gather`. The main process's
        block has run when this returns."""
        arguments = arguments if arguments is not None else [None] * self.workers
        dead = set()
        for j, (pipe, argument) in enumerate(zip(self._pipes, arguments, strict=True)):
            if argument is not _SKIP:
                try:
                    pipe.send((command, argument))
                except (BrokenPipeError, OSError):
                    dead.add(j)
        return [j for j, a in enumerate(arguments) if a is not _SKIP], dead

    def _gather(self, which: list[int] | None = None, dead: set[int] | None = None) -> list[Any]:
        """The answers of workers ``which`` (all by default), in worker order, ``{}`` for
        the others; a worker's error raises here (its type where it is a common one, else
        RuntimeError) after all of them have answered."""
        which = list(range(len(self._pipes))) if which is None else which
        answers: list[Any] = [{} for _ in self._pipes]
        failure = None
        for j in which:
            try:
                if dead and j in dead:
                    raise EOFError
                _wait(self._pipes[j])
                status, value = self._pipes[j].recv()
            except (EOFError, OSError):
                status, value = "died", None
            if status == "ok":
                answers[j] = value
            elif failure is None:
                failure = (j, status, value)
        if failure is not None:
            j, status, value = failure
            if status == "died":
                self.close()
                raise RuntimeError(f"worker {j} of the vector env died; the vector env is closed")
            name, message = value
            raise _ERRORS.get(name, RuntimeError)(f"{message} (in worker {j})")
        return answers

    def _merge(self, infos: list[dict]) -> dict[str, Any]:
        """The workers' infos (Gymnasium's vector form over their blocks) as one."""
        merged: dict[str, Any] = {}
        for (first, count), info in zip(self._blocks, infos, strict=True):
            _place(merged, info, first, count, self.num_envs)
        return merged

    # -- the Gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self._require_open()
        seeds = env_seeds(seed, self.num_envs)
        mask = reset_mask(options, self.num_envs, self._reset_once)
        arguments: list[Any] = []
        for first, count in self._blocks:
            block = mask[first : first + count]
            options = None if block.all() else {"reset_mask": block}
            seed_block = seeds[first : first + count]
            arguments.append({"seed": seed_block, "options": options} if block.any() else _SKIP)
        # The main process's block writes its rows of ``obs`` whether or not it resets.
        main = None if arguments[-1] is _SKIP else arguments[-1]
        obs, infos = self._run("reset", arguments[:-1], main)
        self._needs_reset[mask] = False
        self._reset_once = True
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        self._require_open()
        if not self._reset_once:
            raise RuntimeError("call reset() before step()")
        source, scores = self._scores(actions)
        obs, infos = self._run("step", [source] * (self.workers - 1), scores)
        truncated = self._arrays["truncated"].copy()
        self._needs_reset = truncated.copy()
        return (
            obs,
            self._arrays["rewards"].copy(),
            self._arrays["terminated"].copy(),
            truncated,
            infos,
        )

    def _run(self, command: str, arguments: list[Any], main: Any) -> tuple[Any, dict]:
        """``command`` in every block (the workers' ``arguments``, the main process's
        ``(main, target)``): the observation and the merged infos. The workers get theirs
        first; then this process makes the arrays it returns and steps or resets its block
        into them while they work, and copies their rows after."""
        which, dead = self._post(command, [*arguments, _SKIP])
        obs, target = self._target()
        self._pipes[-1].send((command, (main, target)))
        infos = self._merge(self._gather([*which, self.workers - 1], dead))
        self._workers_rows(obs)
        return obs, infos

    def _scores(self, actions: Any) -> tuple[str, np.ndarray]:
        """The batch checked whole before any env steps (a refused batch changes none): the
        shared array the workers read their rows of, and this process's block's rows. A
        float32 batch (the action space's dtype) of finite scores with no env resetting
        goes as it is: the workers' rows copied, this process's read in place."""
        first = self._blocks[-1][0]
        shared = self._arrays["actions32"]
        if (
            type(actions) is np.ndarray
            and actions.dtype == np.float32
            and actions.flags.carray
            and actions.shape == shared.shape
            and not self._needs_reset.any()
            and sum_is_finite(actions)  # else checked_scores names the envs
        ):
            np.copyto(shared[:first], actions[:first])
            return "actions32", actions[first:]
        scores = checked_scores(
            actions, self._needs_reset, self._num_scores, out=self._arrays["actions"]
        )[0]
        return "actions", scores[first:]

    def _target(self) -> tuple[Any, tuple[np.ndarray, ...]]:
        """The observation the call returns (new arrays with :attr:`copy`, the shared
        ones else), and the rows of it the main process's block writes: its dynamic
        arrays' (in ``DYNAMIC_KEYS``' order) or the flat array's. The static keys are the
        same for every env and step: written here with ``copy``, once in shared memory."""
        first = self._blocks[-1][0]
        shared = {key: self._arrays[key] for key in self._obs_keys}
        if not self._dict:
            obs = shared["obs"] if not self.copy else np.empty_like(shared["obs"])
            return obs, (obs[first:],)
        if self.copy:
            dynamic = dict(zip(DYNAMIC_KEYS, fresh_observation(self._obs_specs), strict=True))
            shared = returned_observation(shared, self._static_rows, dynamic)
        return shared, tuple(shared[key][first:] for key in DYNAMIC_KEYS)

    def _workers_rows(self, obs: Any) -> None:
        """With :attr:`copy`, the worker processes' rows of the observation, copied out of
        shared memory into ``obs`` (the static keys' are there already)."""
        if not self.copy:
            return
        first = self._blocks[-1][0]
        if not self._dict:
            obs[:first] = self._arrays["obs"][:first]
            return
        for key in DYNAMIC_KEYS:
            obs[key][:first] = self._arrays[key][:first]

    def _require_open(self) -> None:
        if self.closed:
            raise RuntimeError("the vector env is closed: make a new one")

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name`` (picklable values), as the batched env gives it."""
        self._require_open()
        return tuple(
            value for block in self._send("get_attr", [name] * self.workers) for value in block
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name(*args, **kwargs)``, as the batched env's :meth:`call` (which
        refuses ``step``, ``reset`` and ``close``); arguments and values are pickled."""
        self._require_open()
        if name in SFMSNVectorEnv.UNCALLABLE:
            raise AttributeError(
                f"call({name!r}) is refused by the vector env: it steps its envs' states "
                f"itself; use its own {name}()"
            )
        return tuple(
            value
            for block in self._send("call", [(name, args, kwargs)] * self.workers)
            for value in block
        )

    def set_attr(self, name: str, values: Any) -> None:
        """Refused, as by the batched env: the workers read their settings when made."""
        raise AttributeError(
            f"set_attr({name!r}): the vector env reads its envs' settings when it is made; "
            "make a new one with the setting"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError(
            "a vector env over worker processes cannot be copied (its envs live in the "
            "workers); copy.deepcopy works on the in-process one (workers=1)"
        )

    def __del__(self) -> None:
        # Gymnasium 1.2's VectorEnv closes an env on deletion, later ones do not: the
        # workers are this env's to stop either way.
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                self.close()

    def close_extras(self, **kwargs: Any) -> None:
        for pipe in getattr(self, "_pipes", ()):
            with contextlib.suppress(BrokenPipeError, OSError):
                pipe.send(("close", None))
        for pipe in getattr(self, "_pipes", ()):
            try:
                if pipe.poll(5):
                    pipe.recv()
            except (EOFError, OSError):
                pass
            pipe.close()
        for process in getattr(self, "_processes", ()):
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
        self._pipes, self._processes = [], []


def _place(merged: dict[str, Any], info: dict[str, Any], first: int, count: int, n: int) -> None:
    """Put one worker's vector-form ``info`` (``count`` envs) at rows ``first`` on of
    ``merged`` (``n`` envs), nested dicts included."""
    rows = slice(first, first + count)
    for key, value in info.items():
        if isinstance(value, dict):
            _place(merged.setdefault(key, {}), value, first, count, n)
            continue
        value = np.asarray(value)
        if key not in merged:
            if value.dtype == object:
                merged[key] = np.full(n, None, dtype=object)
            else:
                merged[key] = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
        merged[key][rows] = value
