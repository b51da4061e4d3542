"""The core works without the learning stack (torch, PyG, SB3, TensorBoard, matplotlib).

Each check runs in a fresh interpreter in which those packages cannot be imported (a
meta-path finder refuses them), so the default run proves it on a full install; CI runs the
same module again in a virtual environment that never installed them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK = textwrap.dedent("""
    import sys
    BLOCKED = {"torch", "torch_geometric", "stable_baselines3", "tensorboard", "matplotlib",
               "rich"}

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
""")


def run_blocked(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_core__env_agents_and_harness_run_without_the_learning_stack():
    result = run_blocked("""
        import gymnasium as gym
        import numpy as np
        import mabp_gym
        from mabp_gym import evaluate, make_policy, stable_load

        env = gym.make("mabp_gym/SFMSN-v0", load=0.5)
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            obs, reward, *_ = env.step(env.action_space.sample())
        assert np.isfinite(reward)
        for name in ("sp", "jsq", "bp", "cost-bp", "greedycache-bp", "mabp",
                     "mabp-no-transition", "mabp-no-reuse", "mabp-no-retention",
                     "oracle-sur", "frame-mabp"):
            make_policy(name, env).act(obs, env.unwrapped.sim.state)
        records = evaluate(["bp", "mabp", "oracle-sur"], "mixed", [0.3], [0], horizon=40,
                           backend="serial")
        assert len(records) == 3 and all(r["completion_ratio"] is not None for r in records)
        for name in ("gnn", "learn-mabp"):
            try:
                make_policy(name, "mixed")
            except ImportError as error:
                assert "pip install 'mabp-gym[learn]'" in str(error), error
            else:
                raise AssertionError(f"{name} built without torch")
        assert not {"torch", "matplotlib"} & set(sys.modules)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_cli__eval_runs_and_train_plot_name_their_extra(tmp_path):
    result = run_blocked(f"""
        from mabp_gym.cli import main
        assert main(["eval", "--policy", "bp", "--loads", "0.3", "--seeds", "0",
                     "--horizon", "30", "--no-progress",
                     "--out", {str(tmp_path / "r.jsonl")!r}]) == 0
        for argv, extra in ((["train", "gnn"], "learn"),
                            (["plot", "--results", {str(tmp_path / "r.jsonl")!r},
                              "--out-dir", {str(tmp_path)!r}], "plot")):
            try:
                main(argv)
            except SystemExit as exit:
                assert exit.code == 2
            else:
                raise AssertionError(f"{{argv}} ran without its extra")
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pip install 'mabp-gym[learn]'" in result.stderr
    assert "pip install 'mabp-gym[plot]'" in result.stderr
