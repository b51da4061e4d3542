"""What the hardening costs: repairing a large results file, streaming records with a sync
to disk per record, planning a grid (run keys and up-front validation) and reading a
checkpoint with its digest checked.

    python benchmarks/bench_reliability.py --json results/bench_reliability.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

from _report import emit

from mabp_gym import make_workload
from mabp_gym.agents.checkpoint_file import default_checkpoint
from mabp_gym.agents.gnn import load_checkpoint
from mabp_gym.cli.common import TABLE_POLICIES
from mabp_gym.harness.evaluation import evaluate
from mabp_gym.harness.results_file import _repair
from mabp_gym.harness.runs import METRIC_KEYS, plan


def _padding(count: int) -> bytes:
    lines = []
    for k in range(count):
        record = {
            "key": f"padding{k:08d}",
            "policy": "pad",
            "workload": "pad",
            "load": 0.5,
            "seed": k,
            "horizon": 1,
            **{name: 0.0 for name in METRIC_KEYS},
            "backlog_trace": list(range(600)),
        }
        lines.append(json.dumps(record).encode() + b"\n")
    return b"".join(lines)


def timed(function, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--json", default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "big.jsonl"
        body = _padding(13_536)
        megabytes = len(body) / 1e6

        def torn() -> None:
            path.write_bytes(body + b'{"key": "torn", "pol')
            _repair(path)

        def junk() -> None:
            path.write_bytes(body[: len(body) // 2] + b"42\n" + body[len(body) // 2 :])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _repair(path)

        rows.append(
            {
                "what": f"repair: torn tail of a {megabytes:.0f} MB, 13,536-record file "
                "(read, scan, truncate in place)",
                "seconds": timed(torn),
            }
        )
        rows.append(
            {
                "what": "repair: a junk line in the middle of the same file (set aside, "
                "rewrite to a temporary file, rename)",
                "seconds": timed(junk),
            }
        )

        grid = dict(loads=[0.3, 0.6], seeds=range(20), horizon=20, backend="serial")
        out = Path(scratch) / "runs.jsonl"

        def streamed() -> None:
            out.unlink(missing_ok=True)
            evaluate(["sp", "bp"], "work_reuse", output=out, **grid)

        bare = timed(lambda: evaluate(["sp", "bp"], "work_reuse", **grid))
        synced = timed(streamed)
        rows.append({"what": "80 runs of 20 slots without an output file", "seconds": bare})
        rows.append(
            {"what": "the same with a locked output file, one fsync per record", "seconds": synced}
        )
        rows.append(
            {
                "what": "planning Table I's grid (10 policies x 11 loads x 5 seeds = 550 "
                "runs): validation, one policy each, 550 run keys",
                "seconds": timed(
                    lambda: [
                        s.key
                        for s in plan(
                            list(TABLE_POLICIES),
                            "mixed",
                            [round(0.1 * k, 1) for k in range(1, 11)] + [0.85],
                            range(5),
                        )
                    ],
                    repeat=1,
                ),
            }
        )
    workload = make_workload("mixed")
    rows.append(
        {
            "what": "loading the shipped GNN checkpoint (weights_only, digest, workload check)",
            "seconds": timed(lambda: load_checkpoint(default_checkpoint("gnn", "mixed"), workload)),
        }
    )
    for row in rows:
        print(f"{row['seconds']:9.3f} s  {row['what']}")
    emit({"benchmark": "reliability", "rows": rows}, args.json)


if __name__ == "__main__":
    main()
