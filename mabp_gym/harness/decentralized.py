"""Decentralized runs: one episode of a local rule on every agent of the PettingZoo view.

:func:`run_decentralized` is the harness of the decentralized view (SPEC 10): the same
metrics as :func:`mabp_gym.harness.runs.run`, keyed the same way, with the local rules of
:mod:`mabp_gym.agents.decentralized` acting on :func:`mabp_gym.parallel_env`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from mabp_gym.agents.decentralized import local_policies
from mabp_gym.core.fileformat import workload_digest_of
from mabp_gym.core.metrics import Trace, check_window, summarize
from mabp_gym.core.workload import Workload
from mabp_gym.version import __version__


def decentralized_key(
    name: str, env: Any, *, load: float, seed: int, warmup: float, env_kw: dict[str, Any]
) -> str:
    """Identifier of one decentralized run (the ``key`` every results record carries,
    :func:`mabp_gym.read_records`): local rule, per-link delays, the whole workload, exact
    load, seed, horizon, warm-up, the other env settings and the package version."""
    settings = json.dumps({k: repr(v) for k, v in sorted(env_kw.items())})
    text = "|".join(
        [
            "decentralized",
            name,
            ",".join(map(str, env.link_delays.tolist())),
            workload_digest_of(env.workload),
            repr(float(load)),
            str(int(seed)),
            str(int(env.horizon)),
            repr(float(warmup)),
            settings,
            __version__,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def staleness_label(link_delays: np.ndarray) -> int | str:
    """A run's staleness as its records name it: the delay when every link has the same
    one (however it was given: a number, numpy's, a list or a mapping), else
    ``per-link:`` and a digest of the delays, so that two different settings never share
    a label (and their runs are never pooled as seeds of one)."""
    delays = np.asarray(link_delays, dtype=np.int64)
    if delays.size == 0 or (delays == delays.flat[0]).all():
        return int(delays.flat[0]) if delays.size else 0
    return "per-link:" + hashlib.sha256(delays.tobytes()).hexdigest()[:8]


def run_decentralized(
    name: str,
    workload: str | Workload,
    *,
    load: float,
    seed: int,
    staleness: Any = 0,
    horizon: int = 600,
    warmup: float = 0.2,
    rules: Callable[[Any], dict[str, Any]] | None = None,
    **env_kw: Any,
) -> dict[str, Any]:
    """One episode of local rule ``name`` on every agent; a record of the SPEC 5 metrics.

    The record has the fields :func:`mabp_gym.stable_load` reads, with ``policy`` set to
    ``"{name}@{staleness}"`` so that stable loads come out per staleness. ``rules``, when
    given, builds the agents' rules from the env (``{agent: rule}``, each with ``reset``
    and ``scores``; a learned policy, say) in place of the registered local rule ``name``,
    which then only names the run.
    """
    from mabp_gym.envs.parallel import parallel_env  # PettingZoo loads only here

    # What the record needs is checked before the episode, not after it.
    if isinstance(load, bool) or not isinstance(load, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"load must be one number (a run's record has one load), got {load!r}; run one "
            "episode per load"
        )
    if not (isinstance(warmup, (int, float)) and 0.0 <= warmup < 1.0):
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    env = parallel_env(workload, staleness=staleness, load=load, horizon=horizon, **env_kw)
    check_window(env.horizon, warmup)
    agents = local_policies(name, env) if rules is None else rules(env)
    if set(agents) != set(env.possible_agents):
        raise ValueError(
            f"rules must give one rule per agent {sorted(env.possible_agents)}, "
            f"got {sorted(agents)}"
        )
    for rule in agents.values():
        rule.reset(seed)
    obs, _ = env.reset(seed=seed)
    trace = Trace()
    while env.agents:
        obs, *_ = env.step({a: agents[a].scores(obs[a]) for a in env.agents})
        assert env.last_outcome is not None
        trace.record(env.last_outcome)
    label = staleness_label(env.link_delays)
    return {
        "key": decentralized_key(name, env, load=load, seed=seed, warmup=warmup, env_kw=env_kw),
        "policy": f"{name}@{label}",
        "local_policy": name,
        "staleness": label,
        "workload": env.workload.name,
        "load": float(load),
        "seed": int(seed),
        "horizon": int(horizon),
        "warmup": float(warmup),
        "telemetry_per_agent": float(np.mean([x.telemetry_received for x in env.layouts])),
        **summarize(trace, warmup),
    }
