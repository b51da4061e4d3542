"""Policies by name (mabp_gym.registry): lazy entry points, registration, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mabp_gym import evaluate, make_workload
from mabp_gym.agents.base import Policy
from mabp_gym.registry import (
    POLICIES,
    checkpoint_path,
    make_policy,
    policy_names,
    register_policy,
)


def test_registry__builtin_names_resolve_without_importing_agents_first():
    code = (
        "import sys, mabp_gym.registry as r\n"
        "assert 'mabp_gym.agents' not in sys.modules\n"
        "p = r.make_policy('mabp-no-reuse', 'mixed')\n"
        "assert p.name == 'mabp-no-reuse' and p.reuse is False\n"
        "assert 'mabp_gym.agents.mabp' in sys.modules\n"
        "assert 'mabp_gym.agents.gnn' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registry__lists_every_builtin_once_in_table_order():
    assert POLICIES[:5] == ("sp", "jsq", "bp", "cost-bp", "greedycache-bp")
    assert len(set(POLICIES)) == len(POLICIES)
    assert {"random", "constant", "residual-mabp"} <= set(POLICIES)
    assert set(POLICIES) <= set(policy_names())


@pytest.mark.parametrize(
    ("name", "entry", "message"),
    [
        ("", "x:y", "non-empty string"),
        ("mabp", "x:y", "already registered"),
        ("new-one", "no_colon", "module:attribute"),
        ("new-one", 3, "string or a callable"),
    ],
)
def test_register_policy__bad_input_is_refused_with_what_is_allowed(name, entry, message):
    before = policy_names()
    with pytest.raises(ValueError, match=message):
        register_policy(name, entry)
    assert policy_names() == before


def test_make_policy__unknown_name_lists_the_names():
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of"):
        make_policy("nope", "mixed")


def test_register_policy__a_callable_runs_in_the_harness_by_name():
    class AllServe(Policy):
        def _fill(self, obs, queues, out):
            out[:] = 1.0

    if "test-all-serve" not in policy_names():
        register_policy("test-all-serve", AllServe)
    records = evaluate(["test-all-serve"], "mixed", [0.2], [0], horizon=30, backend="serial")
    assert [r["policy"] for r in records] == ["test-all-serve"]
    assert records[0]["completion_ratio"] > 0  # it served: requests completed


def test_checkpoint_path__learned_policies_name_their_shipped_file():
    path = checkpoint_path("gnn", {}, "mixed")
    assert path is not None and path.name == "gnn_mixed.pt" and path.is_file()
    assert checkpoint_path("mabp", {}, "mixed") is None
    assert checkpoint_path("mabp", {"checkpoint": "x.pt"}, "mixed").name == "x.pt"


def test_make_policy__env_settings_pass_through():
    policy = make_policy("bp", make_workload("mixed"), nu=2.0, memory=False)
    assert policy.nu == 2.0 and policy.memory is False
    assert np.isfinite(policy.nu)


def test_checkpoint_path__several_patterns_take_the_first_shipped_file():
    if "test-two-files" not in policy_names():
        register_policy(
            "test-two-files",
            "mabp_gym.agents.mabp:MABP",
            checkpoint=("never_{workload}.pt", "gnn_{workload}.pt"),
        )
    assert checkpoint_path("test-two-files", {}, "mixed").name == "gnn_mixed.pt"
    # none shipped: the first pattern's file, which the policy's error then names
    assert checkpoint_path("test-two-files", {}, "rag").name == "never_rag.pt"
    assert checkpoint_path("residual-frame-mabp", {}, "rag").name == "residual_frame_mabp_any.pt"


def test_a_policy_named_module_colon_class_runs_from_the_cli_and_is_keyed_by_its_source(
    run_cli, tmp_path, monkeypatch
):
    from mabp_gym.registry import _REGISTRY

    module = tmp_path / "my_policies.py"
    module.write_text("from mabp_gym.agents.shortest_path import JoinShortestQueue as Mine\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs.jsonl"
    args = ("eval", "--workload", "mixed", "--loads", "0.3", "--seeds", "0", "--horizon", "200")
    args += ("--workers", "1", "--out", str(out))
    try:
        mine = run_cli(*args, "--policy", "my_policies:Mine", "jsq")
        assert mine.returncode == 0, mine.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        ours, theirs = (next(r for r in records if r["policy"] == p) for p in (NAME, "jsq"))
        assert ours["mean_backlog"] == theirs["mean_backlog"]  # JSQ under another name
        # The same policy again: its run is reused. An edited one is another policy.
        assert run_cli(*args, "--policy", NAME).returncode == 0
        assert len(out.read_text().splitlines()) == 2
        module.write_text("from mabp_gym.agents.shortest_path import ShortestPath as Mine\n")
        monkeypatch.delitem(sys.modules, "my_policies")  # as a new process would import it
        assert run_cli(*args, "--policy", NAME).returncode == 0
        assert len(out.read_text().splitlines()) == 3
    finally:
        _REGISTRY.pop(NAME, None)
    for bad in ("my_policies:Nope", "no_such_module:X"):
        refused = run_cli("eval", "--policy", bad, "--loads", "0.3")
        assert refused.returncode == 2 and "cannot import it" in refused.stderr
        assert bad not in _REGISTRY


NAME = "my_policies:Mine"


def test_import_entry_point__finds_a_module_in_the_working_folder_last(tmp_path, monkeypatch):
    from mabp_gym.core.validate import import_entry_point

    (tmp_path / "beside_me.py").write_text("def Thing(workload, **kw):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert import_entry_point("policy", "beside_me:Thing").__name__ == "Thing"
    assert sys.path[-1] == str(tmp_path)  # appended: it shadows no installed module
    with pytest.raises(ValueError, match="cannot import it"):
        import_entry_point("policy", "not_here_either:Thing")


def test_a_worker_started_by_spawn_knows_the_parents_own_policies(tmp_path, monkeypatch):
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from mabp_gym.harness.dispatch import _start_worker
    from mabp_gym.registry import _REGISTRY, user_registrations

    (tmp_path / "spawned_policies.py").write_text(
        "from mabp_gym.agents.shortest_path import JoinShortestQueue as Mine\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # a spawned child gets the parent's path
    register_policy("test-short-name", "spawned_policies:Mine")
    try:
        assert "test-short-name" in [s.name for s in user_registrations()]
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=spawn) as bare:
            assert "test-short-name" not in bare.submit(policy_names).result()
        with ProcessPoolExecutor(
            1,
            mp_context=spawn,
            initializer=_start_worker,
            initargs=(os.getpid(), user_registrations()),
        ) as pool:
            assert "test-short-name" in pool.submit(policy_names).result()
    finally:
        _REGISTRY.pop("test-short-name", None)


def test_register_policy__your_entry_point_is_imported_now_and_run_settings_not_fixed():
    # A typo was accepted, then failed at the first run with the name taken for good.
    before = policy_names()
    with pytest.raises(ValueError, match="cannot import it"):
        register_policy("test-typo", "no_such_policies_module:Mine")
    with pytest.raises(ValueError, match="cannot fix nu: every run sets them"):
        register_policy("test-nu", "mabp_gym.agents.shortest_path:JoinShortestQueue", nu=2.0)
    assert policy_names() == before


def _module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_evaluate__takes_a_module_colon_class_name_as_make_policy_does(tmp_path, monkeypatch):
    from mabp_gym.registry import _REGISTRY

    body = "from mabp_gym.agents.shortest_path import JoinShortestQueue as Mine\n"
    _module(tmp_path, monkeypatch, "eval_named_policies", body)
    try:
        (record,) = evaluate("eval_named_policies:Mine", "mixed", [0.3], [0], horizon=50)
        assert record["policy"] == "eval_named_policies:Mine"
    finally:
        _REGISTRY.pop("eval_named_policies:Mine", None)


def test_plan__an_error_inside_your_policys_constructor_keeps_its_traceback(
    tmp_path, monkeypatch, run_cli
):
    """A bug in your constructor read as a one-line refusal of the command's arguments,
    with no file or line; a keyword your policy does not take is still one line."""
    from mabp_gym.registry import _REGISTRY

    body = (
        "class Buggy:\n"
        "    def __init__(self, workload, nu=5.0, memory=True):\n"
        "        raise ValueError('cannot reshape array of size 384')\n"
    )
    _module(tmp_path, monkeypatch, "buggy_policies", body)
    try:
        with pytest.raises(RuntimeError, match="policy 'buggy_policies:Buggy' raised ValueError"):
            evaluate("buggy_policies:Buggy", "mixed", [0.3], [0], horizon=50)
        done = run_cli("eval", "--policies", "buggy_policies:Buggy", "--loads", "0.3")
        assert done.returncode == 1 and "Traceback" in done.stderr
        assert 'buggy_policies.py", line 3' in done.stderr
        wrong = run_cli("eval", "--policies", "jsq", "--loads", "0.3", "--policy-kw", "bogus=1")
        assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    finally:
        _REGISTRY.pop("buggy_policies:Buggy", None)


def test_run__a_policy_edited_after_the_sweep_was_planned_is_refused(tmp_path, monkeypatch):
    """Its record would have been filed under the old code's key (and a rerun then took the
    old code's runs as the new code's)."""
    from mabp_gym.harness.runs import plan, run
    from mabp_gym.registry import _REGISTRY

    body = "from mabp_gym.agents.shortest_path import {} as Mine\n"
    _module(tmp_path, monkeypatch, "edited_policies", body.format("JoinShortestQueue"))
    try:
        (spec,) = plan(["edited_policies:Mine"], "mixed", [0.3], [0], horizon=50)
        assert run(spec)["key"] == spec.key
        (tmp_path / "edited_policies.py").write_text(body.format("ShortestPath"))
        with pytest.raises(ValueError, match="changed while the sweep ran"):
            run(spec)
    finally:
        _REGISTRY.pop("edited_policies:Mine", None)


def test_policy_identity__no_address_of_a_partial_or_an_object_argument_gets_in():
    # Each process (a spawned worker, a rerun) put its own address there: every run was
    # refused as "changed while the sweep ran", and no run was ever reused.
    import functools

    from mabp_gym.core.validate import entry_identity

    def make(workload, **kwargs):
        return None

    first = entry_identity(functools.partial(make), {"transform": make})
    again = entry_identity(functools.partial(make), {"transform": make})
    assert first == again and " at 0x" not in first


def test_register_policy__an_entry_that_needs_an_extra_loads_on_first_use():
    from mabp_gym.registry import _REGISTRY

    register_policy("test-needs", "not_installed_extra_module:Heavy", needs="learn")
    try:
        assert "test-needs" in policy_names()  # a plugin registers it whether or not installed
        with pytest.raises(ImportError):
            make_policy("test-needs", "mixed")
    finally:
        _REGISTRY.pop("test-needs", None)


def test_policy_identity__a_spawned_workers_name_for_the_parents_script_is_the_same():
    from mabp_gym.core.validate import entry_identity

    def mine(workload, **kwargs):
        return None

    mine.__module__ = "__main__"  # defined in the script the parent runs
    parent = entry_identity(mine, {})
    mine.__module__ = "__mp_main__"  # how a spawned worker imports the parent's script
    assert entry_identity(mine, {}) == parent and "source ?" not in parent


def test_evaluate__warns_where_your_policys_code_has_no_file_to_key_it_by(tmp_path):
    from mabp_gym.agents.shortest_path import JoinShortestQueue
    from mabp_gym.registry import _REGISTRY

    namespace = {"JoinShortestQueue": JoinShortestQueue}
    exec("def made(workload, **kw):\n    return JoinShortestQueue(workload, **kw)\n", namespace)
    register_policy("test-no-source", namespace["made"])
    try:
        with pytest.warns(UserWarning, match="'test-no-source': its code has no file"):
            evaluate("test-no-source", "mixed", [0.3], [0], horizon=50, output=tmp_path / "r")
    finally:
        _REGISTRY.pop("test-no-source", None)


def test_evaluate__a_policy_that_cannot_reach_spawned_workers_is_refused_before_any_run(
    tmp_path, monkeypatch
):
    import multiprocessing

    from mabp_gym.agents.shortest_path import JoinShortestQueue
    from mabp_gym.registry import _REGISTRY

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda *a, **k: "spawn")
    register_policy("test-lambda", lambda workload, **kw: JoinShortestQueue(workload, **kw))
    out = tmp_path / "runs.jsonl"
    try:
        with pytest.raises(ValueError, match="cannot reach worker processes started by 'spawn'"):
            evaluate("test-lambda", "mixed", [0.3], [0, 1], horizon=50, workers=2, output=out)
        assert not out.exists() or out.read_text() == ""
    finally:
        _REGISTRY.pop("test-lambda", None)
