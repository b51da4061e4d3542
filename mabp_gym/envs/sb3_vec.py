"""A stable-baselines3 ``VecEnv`` over a Gymnasium vector env: the batched env for SB3.

SB3 steps its own ``VecEnv`` API (``DummyVecEnv``: one ``env.step`` per env, in Python).
:class:`SB3VecEnv` hands SB3 a Gymnasium vector env instead, by default the batched
:class:`~mabp_gym.envs.vector_env.SFMSNVectorEnv`, whose slots run in one compiled call
for every env at once::

    from stable_baselines3 import PPO
    from mabp_gym.envs.sb3 import GraphActorCriticPolicy, make_sb3_vec_env

    envs = make_sb3_vec_env("mabp_gym/Mixed-v0", n_envs=8, load=0.6)
    PPO(GraphActorCriticPolicy, envs, n_steps=256, batch_size=256).learn(10_000)

What SB3 sees is what ``DummyVecEnv`` of the same envs gives: the same observations,
rewards (``float32``) and dones step for step with the same seeds, ``terminal_observation``
and ``TimeLimit.truncated`` in the infos, and an env reset in the step that ends its
episode (SB3's convention; Gymnasium's next-step autoreset is turned into it by resetting
the finished envs at once with ``reset(options={"reset_mask": done})``).
``tests/test_sb3_vec.py`` compares the two step by step and through ``PPO.learn``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from mabp_gym.core.validate import is_seed
from mabp_gym.envs.vector_env import SFMSNVectorEnv

_NEXT_STEP = getattr(getattr(gym.vector, "AutoresetMode", None), "NEXT_STEP", "NextStep")


class SB3VecEnv(VecEnv):
    """SB3's ``VecEnv`` API over a Gymnasium vector env with next-step autoreset.

    Args:
        vector_env: a ``gymnasium.vector.VectorEnv`` (``gymnasium.make_vec`` of an SFMSN id
            gives the batched one) whose autoreset mode is ``NEXT_STEP`` and whose
            ``reset`` takes ``options={"reset_mask": mask}`` (Gymnasium >= 1.1).

    Raises:
        TypeError: ``vector_env`` is not a Gymnasium vector env.
        ValueError: its autoreset mode is not ``NEXT_STEP``.
    """

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        if not isinstance(vector_env, gym.vector.VectorEnv):
            raise TypeError(
                "SB3VecEnv wraps a gymnasium.vector.VectorEnv (e.g. gymnasium.make_vec("
                f"'mabp_gym/Mixed-v0', num_envs=8)), got {type(vector_env).__name__}"
            )
        mode = vector_env.metadata.get("autoreset_mode", _NEXT_STEP)
        if mode not in (_NEXT_STEP, "NextStep"):
            raise ValueError(
                f"SB3VecEnv needs a vector env that autoresets on the next step, got "
                f"autoreset_mode={mode!r}"
            )
        # Any: get_attr, set_attr and call are on Gymnasium's vector envs, not its base class.
        self.vector_env: Any = vector_env
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )
        self.metadata = dict(vector_env.metadata)
        self._actions: np.ndarray | None = None

    def reset(self) -> Any:
        seeds = list(self._seeds)
        seed = None if all(s is None for s in seeds) else seeds
        if any(self._options):
            raise ValueError(
                "SB3VecEnv resets every env with the same arguments; per-env reset options "
                f"are not supported, got {self._options!r}"
            )
        obs, infos = self.vector_env.reset(seed=seed)
        self.reset_infos = self._split(infos)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() needs step_async(actions) first")
        obs, rewards, terminated, truncated, infos = self.vector_env.step(self._actions)
        self._actions = None
        dones = np.logical_or(terminated, truncated)
        step_infos = self._split(infos)
        for i, info in enumerate(step_infos):
            info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        if dones.any():
            for i in np.flatnonzero(dones).tolist():
                step_infos[i]["terminal_observation"] = _row(obs, i)
            fresh, reset_infos = self.vector_env.reset(options={"reset_mask": dones})
            for i, info in enumerate(self._split(reset_infos)):
                if dones[i]:
                    self.reset_infos[i] = info
            obs = fresh
        return obs, np.asarray(rewards, dtype=np.float32), dones, step_infos

    def _split(self, infos: dict[str, Any]) -> list[dict[str, Any]]:
        """Gymnasium's vector infos (``key`` and its mask ``_key``) as one dict per env."""
        out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for key, value in infos.items():
            if key.startswith("_"):
                continue
            present = infos.get("_" + key, np.ones(self.num_envs, dtype=bool))
            for i in np.flatnonzero(present).tolist():
                out[i][key] = value[i]
        return out

    def close(self) -> None:
        self.vector_env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        # SB3's get_attr gives a method itself (Gymnasium's calls it): read the envs of the
        # batched or a sync vector env directly, as DummyVecEnv does; the worker env's and
        # the async env's envs live in other processes and answer as Gymnasium's does.
        vector = getattr(self.vector_env, "unwrapped", self.vector_env)
        envs = getattr(vector, "envs", None)
        if not isinstance(envs, list):
            values = self.vector_env.get_attr(attr_name)
            return [values[i] for i in self._get_indices(indices)]
        if isinstance(vector, SFMSNVectorEnv):
            vector._require_open()
        return [envs[i].get_wrapper_attr(attr_name) for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.vector_env.set_attr(attr_name, value)  # the batched env says why it refuses

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kwargs: Any
    ) -> list[Any]:
        values = self.vector_env.call(method_name, *method_args, **kwargs)
        return [values[i] for i in self._get_indices(indices)]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        # The envs of a vector env are its own, unwrapped (a TimeLimit is the vector env's
        # max_episode_steps).
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]

    def _get_indices(self, indices: VecEnvIndices) -> Iterable[int]:
        chosen = list(super()._get_indices(indices))
        bad = [i for i in chosen if not 0 <= i < self.num_envs]
        if bad:
            raise IndexError(f"env indices must be in [0, {self.num_envs}), got {bad}")
        return chosen


def _row(obs: Any, i: int) -> Any:
    if isinstance(obs, dict):
        return {key: value[i].copy() for key, value in obs.items()}
    return np.array(obs[i], copy=True)


def make_sb3_vec_env(
    env_id: str = "mabp_gym/SFMSN-v0",
    n_envs: int = 4,
    *,
    max_episode_steps: int | None = None,
    seed: int | None = None,
    **env_kwargs: Any,
) -> SB3VecEnv:
    """``n_envs`` envs of ``env_id`` for SB3, stepped by the batched vector env.

    Args:
        env_id: a registered SFMSN id. n_envs: how many envs.
        max_episode_steps: truncate each episode after this many steps (as
            ``gym.make(..., max_episode_steps=...)`` would); ``None``: at the horizon.
        seed: as ``VecEnv.seed``: env ``i``'s first reset uses ``seed + i``.
        **env_kwargs: the env's arguments (``workload``, ``load``, ``horizon``, ...).
    """
    if seed is not None and not is_seed(seed):  # before any env is built (it broke resets)
        raise ValueError(f"seed must be None or an integer >= 0, got {seed!r}")
    vector_env = gym.make_vec(
        env_id,
        num_envs=n_envs,
        vectorization_mode="vector_entry_point",
        max_episode_steps=max_episode_steps,
        **env_kwargs,
    )
    envs = SB3VecEnv(vector_env)
    if seed is not None:
        envs.seed(seed)
    return envs
