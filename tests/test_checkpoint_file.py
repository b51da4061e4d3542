"""Checkpoints of the learned schedulers: nothing in a file can run code, a damaged file is
refused naming it, and a checkpoint refuses a workload with other parameters."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

LEARNING = "needs the learning stack: pip install torch==2.13.0 && pip install -e '.[dev]'"
torch = pytest.importorskip("torch", reason=LEARNING)

from mabp_gym import make_workload  # noqa: E402
from mabp_gym.agents import checkpoint_file, make_policy  # noqa: E402
from mabp_gym.agents.gnn import GNNScheduler, load_checkpoint, observation_dims, save_checkpoint  # noqa: E402
from mabp_gym.agents.learn_mabp import PrimitiveEstimate  # noqa: E402
from mabp_gym.core.encoding import ObservationEncoder  # noqa: E402

SHIPPED = Path(checkpoint_file.CHECKPOINT_DIR)


def tiny_gnn(workload) -> GNNScheduler:
    torch.manual_seed(0)
    return GNNScheduler(observation_dims(ObservationEncoder(workload).layout), hidden=8, layers=1)


def exact_estimate(workload) -> PrimitiveEstimate:
    ix = workload.index
    return PrimitiveEstimate(
        ix.work.copy(),
        ix.penalty.copy(),
        ix.successor_law[:, :, :-1].copy(),
        np.ones_like(ix.work, dtype=bool),
        np.ones_like(ix.work),
    )


class _Exploit:
    """Unpickling this object calls ``open(marker, "w")``: a stand-in for ``os.system``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("policy", ["gnn", "learn-mabp"])
def test_checkpoint__a_crafted_pickle_is_refused_not_executed(policy, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"kind": policy, "payload": _Exploit(str(marker))}, path)
    with pytest.raises(ValueError, match=r"evil\.pt: refused: the file holds objects other"):
        make_policy(policy, make_workload("mixed"), checkpoint=path)
    assert not marker.exists()


def corrupt(path: Path, how: str, tmp_path: Path) -> Path:
    data = path.read_bytes()
    target = tmp_path / f"{how}.pt"
    if how == "flipped":
        middle = len(data) // 2
        target.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    elif how == "truncated":
        target.write_bytes(data[: len(data) // 3])
    elif how == "empty":
        target.write_bytes(b"")
    elif how == "text":
        target.write_text("not a checkpoint\n")
    elif how == "json":
        target.write_text(json.dumps({"kind": "gnn"}))
    elif how == "directory":
        target.mkdir()
    return target


@pytest.mark.parametrize("how", ["flipped", "truncated", "empty", "text", "json", "directory"])
def test_checkpoint__a_damaged_file_raises_value_error_naming_it(how, tmp_path):
    wl = make_workload("mixed")
    good = tmp_path / "good.pt"
    save_checkpoint(good, tiny_gnn(wl), wl)
    bad = corrupt(good, how, tmp_path)
    with pytest.raises(ValueError, match=rf"{how}\.pt"):
        load_checkpoint(bad, wl)


def test_checkpoint__the_digest_catches_content_changed_behind_a_valid_container(tmp_path):
    wl = make_workload("mixed")
    path = tmp_path / "g.pt"
    save_checkpoint(path, tiny_gnn(wl), wl)
    payload = torch.load(path, weights_only=True)
    name = next(iter(payload["tensors"]))
    payload["tensors"][name] = payload["tensors"][name] + 1e-3  # one weight nudged
    torch.save(payload, path)  # a well-formed file whose content is not what was signed
    with pytest.raises(
        ValueError,
        match=r"g\.pt: damaged checkpoint: its content does not "
        r"match its digest",
    ):
        load_checkpoint(path, wl)


def test_checkpoint__other_parameters_are_refused_and_named(tmp_path):
    wl = make_workload("mixed")
    other = make_workload("mixed", K=16.0, eps=0.5)
    gnn_path, lm_path = tmp_path / "g.pt", tmp_path / "lm.pt"
    save_checkpoint(gnn_path, tiny_gnn(wl), wl)
    exact_estimate(wl).save(lm_path, wl)
    for policy, path in (("gnn", gnn_path), ("learn-mabp", lm_path)):
        with pytest.raises(
            ValueError,
            match=r"other parameters: K=4\.0 in the checkpoint, "
            r"16\.0 here; eps=0\.1 in the checkpoint, 0\.5",
        ):
            make_policy(policy, other, checkpoint=path)
        # The load and the horizon are evaluation settings, not the network: accepted.
        make_policy(policy, make_workload("mixed", load=0.3, horizon=50), checkpoint=path)
    # A transfer experiment may run the GNN on other parameters when it says so.
    policy = make_policy("gnn", other, checkpoint=gnn_path, any_parameters=True)
    assert policy.model is not None
    # Its scores do not read nu: another nu than the training's is refused, not ignored
    # (it ran at nu=1 with nu=5's scores); the shipped file, made before nu was recorded,
    # counts as nu=5, as it was trained.
    from mabp_gym.agents import checkpoint_file

    assert checkpoint_file.load(gnn_path, "gnn")[1]["nu"] == 5.0
    for path in (gnn_path, None):
        with pytest.raises(ValueError, match=r"trained at nu=5 .* cannot act for nu=1"):
            make_policy("gnn", wl, checkpoint=path, nu=1.0)
    assert make_policy("gnn", wl, checkpoint=gnn_path, nu=1.0, any_parameters=True).nu == 1.0
    assert make_policy("gnn", wl, nu=5.0).nu == 5.0


def test_checkpoint__a_file_workload_names_the_differing_fields(tmp_path):
    wl = make_workload("work_reuse")
    path = tmp_path / "lm.pt"
    exact_estimate(wl).save(path, wl)
    description = wl.to_dict()
    description["nodes"][0]["mu"] = 2 * description["nodes"][0]["mu"]
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(description))
    with pytest.raises(ValueError, match=r"differs from 'work_reuse' at .*nodes\[0\]\.mu"):
        make_policy("learn-mabp", make_workload(str(changed)), checkpoint=path)


def test_checkpoint__round_trip_keeps_weights_and_notes(tmp_path):
    wl = make_workload("mixed")
    model = tiny_gnn(wl)
    digest = save_checkpoint(tmp_path / "g.pt", model, wl, epoch=3, command="x")
    loaded, meta = load_checkpoint(tmp_path / "g.pt", wl)
    assert meta["epoch"] == 3 and meta["command"] == "x" and len(digest) == 64
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name])


@pytest.mark.parametrize("name", ["gnn_mixed.pt", "learn_mabp_mixed.pt"])
def test_shipped_checkpoints__are_version_2_tensors_only_files(name):
    payload = torch.load(SHIPPED / name, weights_only=True)  # raises on any other object
    assert payload["format"] == checkpoint_file.FORMAT and payload["version"] == 2
    meta = json.loads(payload["meta"])
    assert meta["workload_identity"]["params"]["K"] == 4.0
    assert payload["digest"] == checkpoint_file.content_digest(payload["tensors"], payload["meta"])
    assert os.path.getsize(SHIPPED / name) < 1_000_000


def test_ppo_archive__no_pickled_field_is_unpickled_and_unknown_ones_are_refused(tmp_path):
    import base64
    import pickle
    import types
    import zipfile

    from mabp_gym.training.gnn import GNNArgs, _ppo_archive_objects

    marker = tmp_path / "pwned"
    evil = {":serialized:": base64.b64encode(pickle.dumps(_Exploit(str(marker)))).decode()}
    envs = types.SimpleNamespace(observation_space="obs", action_space="act")
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr(
            "data", json.dumps({"policy_class": evil, "lr_schedule": evil, "n_steps": 8})
        )
    replaced = _ppo_archive_objects(archive, envs, GNNArgs())
    assert set(replaced) == {"policy_class", "lr_schedule"} and not marker.exists()
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("data", json.dumps({"policy_class": evil, "payload": evil}))
    with pytest.raises(ValueError, match=r"run\.zip: refused: pickled fields \['payload'\]"):
        _ppo_archive_objects(archive, envs, GNNArgs())
    assert not marker.exists()
