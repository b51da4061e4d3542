"""``mabp-gym fleet``: routers over a replayed trace (SPEC 11, Table II), its records
appended to ``--out`` as each run ends and skipped when the command is run again."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from mabp_gym.cli.common import (
    _distinct_files,
    _finite,
    _no_repeats,
    _parse_overrides,
    _writable,
    user_input,
)

FLEET_LEGEND = (
    "Thr.: completed trace requests per second; Goodput: those within both SLOs (TTFT and "
    "TPOT, FleetConfig.slo_ttft_s / slo_tpot_s) per second; P95 TTFT: time to first token; "
    "P95 TPOT: time per output token after the first; P95 E2E: arrival to last token; GPU "
    "s/req: GPU busy seconds per completed request; KV hit: prompt tokens found in the prefix "
    "cache; Jobs/req: downstream tool jobs per completed request; Drops: share of arrivals "
    "dropped (queue full or timeout); P95 sched.: the router's decision time (Python). "
    "Mean +- 95% Student-t half-width over the runs (one run: its value, no interval)."
)


def _fleet_records(path: Path) -> dict[str, dict[str, Any]]:
    """The fleet records already in ``--out`` by key, after the repair the evaluations'
    files get (the caller holds the lock): a torn last line is cut off, and lines that are
    not fleet records go to the ``.rejected`` sidecar, so their runs are made again."""
    from mabp_gym.harness.results_file import _repair

    done = _repair(path, "fleet", _fleet_problem)
    # JSON has no NaN: an undefined figure was written as null.
    return {
        key: {k: math.nan if v is None else v for k, v in record.items()}
        for key, record in done.items()
    }


def _fleet_problem(value: Any) -> str | None:
    """Why a parsed line is not a whole fleet record (``None`` when it is one): a line
    missing a field or holding a value of the wrong kind crashed the table of every later
    run."""
    from mabp_gym.core.validate import is_real
    from mabp_gym.fleet.simulator import METRICS

    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    for name in ("key", "router", "trace"):
        if not isinstance(value.get(name), str):
            return f"field {name!r} is {value.get(name)!r}"
    if not is_real(value.get("load")):
        return f"field 'load' is {value.get('load')!r}"
    for name in METRICS:
        if name not in value:
            return f"no {name!r} field"
        if value[name] is not None and not is_real(value[name]):
            return f"field {name!r} is {value[name]!r}"
    return None


def _bools(overrides: dict[str, Any]) -> dict[str, Any]:
    """``--set NAME=true`` / ``false`` for the fleet's on/off settings."""
    from dataclasses import fields

    from mabp_gym.fleet import FleetConfig

    switches = {f.name for f in fields(FleetConfig) if f.type == "bool"}
    for name in switches & set(overrides):
        text = str(overrides[name]).lower()
        if text not in ("true", "false"):
            raise ValueError(f"--set {name}: give true or false, got {overrides[name]!r}")
        overrides[name] = text == "true"
    return overrides


_FLAGS = {
    "FleetConfig.num_workers": "--fleet-size",  # before the --set rewrite below
    "engine='step'": "--engine step",
    "leave profile out": "leave --profile out",
    "profile=": "--profile ",
    "FleetConfig.": "--set ",
}
"""The fleet library's keyword spellings in its messages, as this command's flags."""


def _register_user_router(entry: str) -> None:
    """Register ``module:attribute`` (a router class or factory importable here) as a
    ``user`` router named by that text, after importing it, so that a typo is refused
    before any run."""
    from mabp_gym.core.validate import import_entry_point
    from mabp_gym.fleet import register_router

    register_router(entry, import_entry_point("--routers", entry))


def _fleet(args: argparse.Namespace) -> None:
    from mabp_gym.fleet import ROUTERS, load_trace, make_config, scale_to_load
    from mabp_gym.fleet.evaluate import evaluate_fleet, format_table
    from mabp_gym.fleet.simulator import check_block_size, check_engine_config
    from mabp_gym.harness.results_file import _ResultsFile

    with user_input(_FLAGS):
        overrides = _bools(_parse_overrides(args.overrides))
        if "num_workers" in overrides:
            raise ValueError(
                f"--set num_workers={overrides['num_workers']!r}: give the fleet's size with "
                "--fleet-size"
            )
        config = make_config(num_workers=args.workers, **overrides)
        profile = check_engine_config(config, args.engine, args.profile)
        routers = [r for token in (args.routers or list(ROUTERS)) for r in token.split(",") if r]
        if not routers:
            raise ValueError(f"--routers: name at least one router of {sorted(ROUTERS)}")
        for router in routers:
            if router not in ROUTERS and ":" in router:
                _register_user_router(router)
            if router not in ROUTERS:
                raise ValueError(
                    f"--routers: unknown router {router!r}; choose from {sorted(ROUTERS)}, "
                    "or give your own as module:Class"
                )
        _no_repeats(routers, "--routers")
        for load in args.loads:
            if not (math.isfinite(load) and load > 0):
                raise ValueError(f"--loads: each load must be a finite number > 0, got {load}")
        _no_repeats(args.loads, "--loads")
        if args.runs < 1:
            raise ValueError(f"--runs must be a positive integer, got {args.runs}")
        if args.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {args.seed}")
        _distinct_files(args, ("out", "markdown", "json"), ("trace",))
        _writable(args.markdown, "--markdown")
        _writable(args.json, "--json")
        _writable(args.out, "--out", results="fleet")
        if args.requests is not None and args.requests < 2:
            raise ValueError(f"--requests must be >= 2, got {args.requests}")
        # A bad line is named in the error; with --requests the rest is never read.
        trace = load_trace(args.trace, args.requests)
        if args.requests is not None and args.requests > len(trace):
            raise ValueError(
                f"--requests must be at most the trace's {len(trace)} requests (leave it out "
                f"for all of them), got {args.requests}"
            )
        if args.spread_bursts:
            trace = trace.spread_bursts()
        check_block_size(trace, config)
        for load in args.loads:  # a trace that cannot take a load says so before any run
            try:
                scale_to_load(trace, load, config)
            except ValueError as error:
                raise ValueError(f"--loads {load:g} on trace {trace.name}: {error}") from None
    with contextlib.ExitStack() as held:
        done: dict[str, dict[str, Any]] = {}
        sink = None
        if args.out is not None:
            # Under the evaluations' lock: a second writer would run and append the same runs.
            sink = held.enter_context(_ResultsFile(Path(args.out)))
            done = _fleet_records(sink.path)
            sink.open_for_append()
        records = evaluate_fleet(
            trace,
            routers,
            args.loads,
            args.runs,
            config,
            seed=args.seed,
            progress=lambda line: print(line, file=sys.stderr),
            engine=args.engine,
            profile=profile,
            done=done,
            on_record=None if sink is None else lambda record: sink.write(_finite(record)),
        )
    table = format_table(records, routers, args.layout)
    print(
        f"trace {trace.name}: {len(trace)} requests, {config.num_workers} workers, "
        f"{args.engine} engine" + (f", profile {profile}" if profile else "")
    )
    print(table)
    print(FLEET_LEGEND)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        # NaN is not JSON: an undefined figure (no request of a kind) is written as null.
        Path(args.json).write_text(json.dumps(_finite(records), indent=2), encoding="utf-8")
