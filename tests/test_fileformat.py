"""Workloads from files: round trips, validation errors with their path, the multihop
example, and the command line on a file."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import yaml

import mabp_gym
from mabp_gym import WORKLOADS, Simulator, Workload, capacity, make_workload
from mabp_gym.core.fileformat import SCHEMA_PATH, save_workload, workload_from_dict
from mabp_gym.core.scores import queue_length_scores

MULTIHOP = Path(mabp_gym.__file__).parent / "examples" / "multihop14.json"


def trajectory(workload: Workload, seed: int = 5, slots: int = 120) -> list:
    sim = Simulator(workload, check_invariants=True)
    sim.reset(seed)
    rows = []
    for _ in range(slots):
        _, out = sim.step_scores(queue_length_scores(workload, sim.state))
        rows.append(
            (
                out.arrivals,
                out.delays,
                out.backlog,
                out.generated,
                out.evicted,
                out.penalty,
                sim.state.holder.tobytes(),
            )
        )
    return rows


@pytest.mark.parametrize("name", WORKLOADS)
def test_file__every_builtin_round_trips_to_an_identical_simulation(name, tmp_path):
    wl = make_workload(name)
    path = tmp_path / f"{name}.json"
    save_workload(wl, path)
    again = make_workload("file", path=str(path))
    assert again.to_dict() == wl.to_dict() and again.lambda_ref == wl.lambda_ref
    assert trajectory(again) == trajectory(wl)
    jsonschema.validate(json.loads(path.read_text()), json.loads(SCHEMA_PATH.read_text()))


def test_file__yaml_and_gym_make_and_overrides(tmp_path):
    data = make_workload("successor").to_dict()
    path = tmp_path / "successor.yaml"
    path.write_text(yaml.safe_dump(data))
    wl = make_workload(str(path), load=0.5, horizon=50)
    assert wl.load == 0.5 and wl.horizon == 50 and wl.name == "successor"
    import gymnasium as gym

    env = gym.make("mabp_gym/SFMSN-v0", workload=str(path), load=0.7)
    assert env.unwrapped.workload.load == 0.7
    with pytest.raises(ValueError, match="accepts the overrides load and horizon only"):
        make_workload(str(path), beta=0.5)
    with pytest.raises(ValueError, match=r"no workload file at '[^']*missing.json'$"):
        make_workload(str(tmp_path / "missing.json"))
    # A shipped example named from elsewhere (a pip install has no checkout): the error
    # says where the package keeps it.
    shipped = MULTIHOP.parent / "codeassist.json"
    with pytest.raises(
        ValueError, match=re.escape(f"the package ships codeassist.json at '{shipped}'")
    ):
        make_workload(str(tmp_path / "codeassist.json"))


def broken(edit) -> dict:
    data = copy.deepcopy(make_workload("mixed").to_dict())
    edit(data)
    return data


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(frobnicate=1), r"frobnicate: unknown key; allowed:"),
        (lambda d: d["links"][2].update(speed=3), r"links\[2\].speed: unknown key"),
        (lambda d: d["actions"][1].pop("node"), r"actions\[1\].node: missing required field"),
        (lambda d: d["links"][3].update(capacity=-2), r"links\[3\].capacity: must be >= 0"),
        (
            lambda d: d["actions"][8].update(
                successors_miss=[["rag/verify/z0", 0.9], ["rag/generate/z1", 0.3]]
            ),
            r"actions\[8\].successors_miss: probabilities sum to 1.2",
        ),
        (lambda d: d["links"][0].update(dst="nowhere"), r"links\[0\].dst: unknown node 'nowhere'"),
        (
            lambda d: d.update(
                actions=[a for a in d["actions"] if a["commodity"] != "moe/expert/z3"]
            ),
            r"commodities\[\d+\]: 'moe/expert/z3' is served by no node",
        ),
        (
            lambda d: d["signatures"][0].update(size=100.0),
            r"signatures\[0\].size: 100 is larger than every node's budget",
        ),
        (lambda d: d["nodes"][1].update(role="gpu"), r"nodes\[1\].role: must be one of"),
        (lambda d: d["arrivals"].update(rate=3.0), r"arrivals: give exactly one of load"),
    ],
)
def test_file__invalid_files_name_the_path_and_what_is_allowed(edit, message, tmp_path):
    data = broken(edit)
    with pytest.raises(ValueError, match=message):
        workload_from_dict(data, source="w.json")
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        make_workload(str(path))


def test_file__malformed_json_is_refused_cleanly(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": [')
    with pytest.raises(ValueError, match="not valid JSON"):
        make_workload(str(path))


def test_multihop__14_nodes_48_links_2_classes_without_memory():
    wl = make_workload(str(MULTIHOP))
    ix = wl.index
    assert (ix.num_nodes, ix.num_links, ix.num_commodities, ix.num_signatures) == (14, 48, 2, 0)
    # No memory objects: both capacities agree (two sources of out-degree 3, capacity 2).
    assert capacity(wl, "nomem") == pytest.approx(capacity(wl, "full")) == pytest.approx(12)


@pytest.mark.slow
def test_multihop__backpressure_stable_below_lp_capacity_unstable_above():
    # Strong stability on a long run: the backlog slope over the second half stays under
    # 0.035 units/slot at 0.7 of the LP capacity; at 1.2 the excess arrival rate,
    # 0.2 x 12 = 2.4 units/slot, must show as a slope above 1 in every seed.
    below = mabp_gym.evaluate(
        "bp", str(MULTIHOP), loads=[0.7], seeds=[0, 1], horizon=2000, warmup=0.5, workers=2
    )
    # The completion ratio counts requests born in the 1000-slot window; those born in its
    # last ~50 slots (about the mean delay) are still in flight at the end.
    assert all(r["slope"] < 0.035 and r["completion_ratio"] > 0.93 for r in below), below
    above = mabp_gym.evaluate(
        "bp", str(MULTIHOP), loads=[1.2], seeds=[0, 1], horizon=1000, warmup=0.5, workers=2
    )
    assert all(r["slope"] > 1.0 for r in above), [r["slope"] for r in above]
    assert np.mean([r["completion_ratio"] for r in above]) < 0.9


def test_cli__capacity_and_eval_take_a_workload_file(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "mabp_gym.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    result = run("capacity", "--workload", str(MULTIHOP))
    assert result.returncode == 0 and "multihop14: no-memory capacity 12.0000" in result.stdout
    out = tmp_path / "e.jsonl"
    result = run(
        "eval",
        "--policy",
        "bp",
        "--workload",
        str(MULTIHOP),
        "--loads",
        "0.5",
        "--seeds",
        "0",
        "--horizon",
        "100",
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert mabp_gym.read_records(out)[0]["workload"] == "multihop14"
    result = run("capacity", "--workload", str(tmp_path / "none.json"))
    assert result.returncode == 2 and "no workload file" in result.stderr


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_file__a_key_given_twice_is_refused_not_overwritten(suffix, tmp_path):
    # json and PyYAML keep the last of two equal keys without a word: one of the author's
    # two values would be dropped unseen.
    text = json.dumps(make_workload("successor").to_dict(), indent=1)
    if suffix == ".yaml":
        text = yaml.safe_dump(json.loads(text))
        doubled = text.replace("name: successor\n", "name: successor\nname: other\n", 1)
    else:
        doubled = text.replace('"name": "successor",', '"name": "successor", "name": "other",', 1)
    assert doubled != text
    path = tmp_path / f"w{suffix}"
    path.write_text(doubled)
    with pytest.raises(ValueError, match=r"w\.(json|yaml): the key 'name' appears twice"):
        make_workload(str(path))
    path.write_text(text)
    assert make_workload(str(path)).name == "successor"


def test_file__memory_that_adds_work_is_refused_as_the_builders_refuse_it():
    # Accepted before: no-memory capacity 4 above the all-hit 1, every load scaled by the
    # smaller, and memory made a load unstable that the network without it carried.
    data = copy.deepcopy(make_workload("work_reuse").to_dict())
    data["actions"][0].update(work_hit=4.0, work_miss=1.0)  # a hit needs more work
    with pytest.raises(ValueError, match=r"w.json: actions: memory adds work here: the fluid no"):
        workload_from_dict(data, source="w.json")
    swapped = copy.deepcopy(make_workload("successor").to_dict())
    for action in swapped["actions"]:  # a hit now sends every job to the verifier
        action["successors_hit"], action["successors_miss"] = (
            action["successors_miss"],
            action["successors_hit"],
        )
    with pytest.raises(ValueError, match="memory adds work here"):
        workload_from_dict(swapped, source="s.json")
    for name in sorted(WORKLOADS):  # memory that only helps still loads, every built-in
        workload_from_dict(make_workload(name).to_dict(), source=f"{name}.json")
    # And a node with work above mu: whole units bound neither LP there, so the check does
    # not compare a whole-unit all-hit bound with a fluid no-memory one (it refused this).
    two = copy.deepcopy(make_workload("work_reuse").to_dict())
    two["nodes"][0].update(mu=2.0, budget=2.0)
    two["commodities"].append({"name": "job2", "family": "job", "stage": 0, "state_type": 0})
    two["signatures"].append({"name": "obj2", "size": 1.0, "kind": "obj"})
    first = two["actions"][0]
    first.update(work_hit=0.6, work_miss=0.6, loss_hit=1.0, loss_miss=1.0)
    second = {**copy.deepcopy(first), "commodity": "job2", "signature": "obj2"}
    second.update(work_hit=1.5, work_miss=2.05)
    two["actions"].append(second)
    two["arrivals"]["mix"] = [
        {"node": "server", "commodity": c, "share": 0.5} for c in ("job", "job2")
    ]
    loaded = workload_from_dict(two, source="two.json")
    assert capacity(loaded, "nomem") <= capacity(loaded, "full")


def test_file__a_miss_left_out_reads_the_hit_value():
    # The schema: work_miss "defaults to work_hit" (the reader does the same for loss_miss):
    # an action that memory does not change needs only its hit fields. to_dict writes both,
    # so the round-trip tests never read the default.
    data = copy.deepcopy(make_workload("work_reuse").to_dict())
    action = data["actions"][0]
    action.update(work_hit=0.5, loss_hit=2.5)
    del action["work_miss"], action["loss_miss"]
    (read,) = workload_from_dict(data, source="w.json").actions
    assert (read.work_hit, read.work_miss) == (0.5, 0.5)
    assert (read.loss_hit, read.loss_miss) == (2.5, 2.5)


def test_file__beta_is_a_fraction_of_the_sum_of_the_eligible_object_sizes():
    # SPEC: B_i(beta) = beta * B_i^max, B_i^max the total size of every signature some
    # action of node i can use. One server with objects of sizes 1 and 3: B^max = 4, so
    # beta = 1 gives 4 (the largest object alone would give 3).
    data = copy.deepcopy(make_workload("work_reuse").to_dict())
    data["signatures"].append({"name": "obj2", "size": 3.0, "kind": "obj"})
    data["commodities"].append({"name": "job2", "family": "job", "stage": 0, "state_type": 1})
    data["actions"].append({**copy.deepcopy(data["actions"][0]), "commodity": "job2"})
    data["actions"][1]["signature"] = "obj2"
    data["arrivals"]["mix"] = [
        {"node": "server", "commodity": c, "share": 0.5} for c in ("job", "job2")
    ]
    node = data["nodes"][0]
    del node["budget"]
    node["beta"] = 1.0
    assert workload_from_dict(data, source="w.json").nodes[0].budget == pytest.approx(4.0)
    node["beta"] = 0.75
    assert workload_from_dict(data, source="w.json").nodes[0].budget == pytest.approx(3.0)
