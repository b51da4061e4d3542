"""Workload files and parameters: what cannot mean anything is refused with a ValueError
naming the path, before anything is built; every mutation of the example file either
loads and runs a slot or is refused that way."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mabp_gym
from mabp_gym import Simulator, make_workload
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.fileformat import load_workload, workload_from_dict
from mabp_gym.core.scores import queue_length_scores
from mabp_gym.core.workloads import check_number

EXAMPLE = Path(mabp_gym.__file__).parent / "examples" / "multihop14.json"


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def edited(edit) -> dict:
    data = example()
    edit(data)
    return data


def _nested(depth: int) -> list:
    value: list = [0]
    for _ in range(depth - 1):
        value = [value]
    return value


def _loop(data: dict) -> None:
    # Commodity b is only ever passed back to itself: a request can never leave.
    for action in data["actions"]:
        if action["commodity"] == "b":
            action["successors_hit"] = [["b", 1.0]]
            action["successors_miss"] = [["b", 1.0]]


def _no_capacity(data: dict) -> None:
    for link in data["links"]:
        link["capacity"] = 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(name=5), r"w\.json: name: must be of type string, got 5"),
        (lambda d: d.update(name=""), r"w\.json: name: must be a non-empty string"),
        (lambda d: d.update(version=True), r"w\.json: version: must be 1, got True"),
        (
            lambda d: d["memory"].update(fixed="false"),
            r"w\.json: memory\.fixed: must be of type boolean, got 'false'",
        ),
        (lambda d: d["links"][4].update(cost=-0.5), r"w\.json: links\[4\]\.cost: must be >= 0"),
        (
            lambda d: d["nodes"][5].update(mu=1e300),
            r"w\.json: nodes\[5\]\.mu: must be <= 1e\+06 \(the documented range\)",
        ),
        (
            lambda d: d["arrivals"].update(load=float("nan")),
            r"w\.json: arrivals\.load: must be finite, got nan",
        ),
        (lambda d: d.update(horizon=10**12), r"w\.json: horizon: must be <= 1e\+07"),
        (
            _no_capacity,
            r"w\.json: arrivals\.load: requests arrive \(load 0\.8\) but the network's "
            r"all-hit capacity lambda_ref is 0",
        ),
        (_loop, r"w\.json: commodities\[1\]: a request at 'b' can never complete"),
        (
            lambda d: d["actions"][0].update(successors_hit=[[["a"], 0.5]]),
            r"w\.json: actions\[0\]\.successors_hit\[0\]\[0\]: must be of type string",
        ),
        (
            lambda d: d.update(transit=_nested(20)),
            r"w\.json: transit(\[0\])+: nested more than 16 levels deep",
        ),
    ],
)
def test_file__what_cannot_mean_anything_is_refused_naming_the_path(edit, message, tmp_path):
    data = edited(edit)
    with pytest.raises(ValueError, match=message):
        workload_from_dict(data, source="w.json")
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message.replace(r"w\.json", re.escape(str(path)))):
        load_workload(path)


def test_file__no_capacity_is_fine_when_no_request_arrives():
    data = edited(_no_capacity)
    data["arrivals"]["load"] = 0.0
    assert workload_from_dict(data).total_rate == 0.0


def test_file__non_utf8_and_deeply_nested_files_name_the_file(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(
        json.dumps(example())
        .replace('"n0"', '"n\\u00e9"')
        .encode()
        .replace(b"\\u00e9", "é".encode("latin-1"))
    )
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: not a UTF-8 text file"):
        load_workload(path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"{re.escape(str(deep))}: nested too deeply"):
        load_workload(deep)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5", "must be a number"),
        (True, "must be a number"),
        (np.bool_(True), "must be a number"),
        (1 + 2j, "must be a number"),
        (np.complex128(1), "must be a number"),
        (np.ma.masked, "must be a number"),
        (np.array([1.0]), "must be a number"),
        (float("inf"), "must be finite"),
        (2.5, "must be an integer"),
        (-1, "must be >= 0"),
    ],
)
def test_check_number__the_one_validator_refuses_what_is_not_a_number(value, message):
    with pytest.raises(ValueError, match=f"x: {message}"):
        check_number(value, "x", low=0, integer=isinstance(value, float) and value == 2.5)
    assert (
        check_number(np.float32(2.0), "x") == 2.0
        and check_number(np.int64(3), "x", integer=True) == 3
    )


@pytest.mark.parametrize("value", ["0.5", True, 1j, None])
def test_make_workload__a_parameter_that_is_not_a_number_is_refused(value):
    with pytest.raises(ValueError, match=r"beta must be a number in \(0, 1\]"):
        make_workload("mixed", beta=value)


# -- mutations of the example file -------------------------------------------------------------
ODD_VALUES = st.sampled_from(
    [
        None,
        True,
        False,
        "false",
        "",
        "x",
        "n0",
        "a",
        0,
        -1,
        1,
        2,
        0.5,
        -0.0,
        1e300,
        -1e300,
        float("nan"),
        float("inf"),
        2**63,
        [],
        {},
        [[]],
        [["a", 1.0]],
        [["b", 1.0]],
        {"node": "n0", "commodity": "a", "share": 1.0},
        _nested(18),
    ]
)


def _containers(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _containers(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _containers(child, (*path, index))


_SOURCES = {
    "multihop14": example,
    "work_reuse": lambda: make_workload("work_reuse").to_dict(),
    "separation": lambda: make_workload("separation").to_dict(),
}


@st.composite
def mutated(draw):
    # The shipped example (a memoryless multihop network) and two small networks with
    # memory, so that signatures, budgets and initial placements are mutated too.
    data = _SOURCES[draw(st.sampled_from(sorted(_SOURCES)))]()
    for _ in range(draw(st.integers(1, 3))):
        places = list(_containers(data))
        path, value = places[draw(st.integers(0, len(places) - 1))]
        kind = draw(st.sampled_from(["replace", "delete", "add", "duplicate", "scale"]))
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        if kind == "replace" and path:
            parent[path[-1]] = copy.deepcopy(draw(ODD_VALUES))
        elif kind == "delete" and path:
            del parent[path[-1]]
        elif kind == "add" and isinstance(value, dict):
            value[
                draw(
                    st.sampled_from(
                        ["extra", "name", "mu", "cost", "load", "rate", "budget", "beta", "fixed"]
                    )
                )
            ] = copy.deepcopy(draw(ODD_VALUES))
        elif kind == "duplicate" and isinstance(value, list) and value:
            value.append(copy.deepcopy(value[draw(st.integers(0, len(value) - 1))]))
        elif (
            kind == "scale"
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and path
        ):
            parent[path[-1]] = value * draw(st.sampled_from([-1, 0, 10, 1e6, 1e12]))
    return data


# A message names the file, then a path in it (``links[2].dst``, ``arrivals``, ``(top)``).
PATH_IN_MESSAGE = re.compile(r"^mutant\.json: (\(top\)|[A-Za-z_]\w*(\.\w+|\[\d+\])*)( |:)")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=mutated())
def test_file__every_mutation_loads_and_runs_a_slot_or_names_a_path(data, tmp_path):
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps(data))
    try:
        workload = load_workload(path)
    except ValueError as error:
        message = str(error).replace(str(tmp_path) + "/", "")
        assert PATH_IN_MESSAGE.match(message), message
        return
    sim = Simulator(workload, check_invariants=True)
    sim.reset(0)
    encoder = ObservationEncoder(workload)
    encoder.encode(sim.state)
    sim.step_scores(queue_length_scores(workload, sim.state))
    encoder.encode(sim.state)
