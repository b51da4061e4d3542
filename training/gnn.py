"""Train the GNN scheduler: imitation of MABP (or Oracle-Sur), then PPO (stable-baselines3).

Reads top to bottom: arguments, seeding, imitation data and fit, PPO fine-tuning, model
selection on held-out seeds, evaluation through ``mabp_gym.evaluate``. Uses ``cuda`` when
there is one (``--device auto``) and the CPU otherwise; logs to TensorBoard under
``--out``; checkpoints every ``--checkpoint-every`` PPO steps; ``--resume`` continues from
a checkpoint's step count.

    mabp-gym train gnn --out runs/gnn --ppo-steps 20000
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mabp_gym.agents import make_policy
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.validate import check_number
from mabp_gym.core.workloads import make_workload
from mabp_gym.training.arguments import (
    check_loads,
    check_out_dir,
    command_line,
    parse_into,
    require_at_least,
)
from mabp_gym.training.common import (
    check_held_out,
    check_network,
    final_eval_seeds,
    rollout,
    seed_everything,
)

if TYPE_CHECKING:  # torch and PyG load inside the functions: arguments are checked first
    import torch

    from mabp_gym.agents.gnn import GNNScheduler

SELECTION_SEEDS = range(100, 102)
"""Seeds of the checkpoint choice (imitation or PPO): no training episode uses them."""
PPO_SEED_OFFSET = 1000
"""PPO's env ``r`` starts from seed ``--seed + 1000 + r`` (the imitation episodes use
``--seed + k``)."""
ARCHIVE_META = "mabp_gym.json"
"""The member of a PPO archive (``ppo_checkpoint.zip``) that records its workload and PPO
settings, so that ``--resume`` refuses another workload or other settings before any
work (Stable-Baselines3 reads only its own members)."""


@dataclass
class GNNArgs:
    """Arguments of ``mabp-gym train gnn``."""

    workload: str = "mixed"
    """Workload to train on (its shape fixes the checkpoint's)."""
    seed: int = 0
    """Seeds torch, numpy and every rollout."""
    teacher: str = "mabp"
    """Policy imitated first: mabp or oracle-sur."""
    imitation_loads: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.6, 0.7, 0.8])
    """Loads of the teacher's episodes (one episode per load)."""
    imitation_slots: int = 600
    """Slots per imitation episode."""
    imitation_noise: float = 0.3
    """Std of the noise on executed scores in every other episode."""
    imitation_epochs: int = 20
    """Passes over the imitation data."""
    batch_size: int = 64
    """Graphs per gradient step in imitation."""
    learning_rate: float = 1e-3
    """Adam learning rate of the imitation phase."""
    hidden: int = 64
    """Embedding width."""
    layers: int = 3
    """Message-passing rounds."""
    ppo_steps: int = 8192
    """PPO environment steps after imitation (0: imitation only)."""
    ppo_load: float = 0.6
    """Load of the PPO environments."""
    ppo_envs: int = 4
    """Vectorized environments for PPO."""
    ppo_rollout: int = 256
    """Steps per environment per PPO update (PPO's n_steps)."""
    ppo_learning_rate: float = 5e-5
    """PPO learning rate (small: fine-tuning a pretrained policy)."""
    checkpoint_every: int = 4096
    """Save a resumable checkpoint every this many PPO steps."""
    select_loads: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7])
    """Held-out loads on which the imitation and PPO models are compared."""
    eval_loads: list[float] = field(default_factory=lambda: [0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    """Loads of the final evaluation."""
    eval_seeds: int = 2
    """Seeds per load."""
    device: str = "auto"
    """Auto (cuda if available), cpu or cuda."""
    threads: int = 1
    """Torch CPU threads (1 is fastest for these small graphs)."""
    out: str = "runs/gnn"
    """Directory for checkpoints, TensorBoard logs and the report."""
    resume: str | None = None
    """A checkpoint of this script to continue from."""
    progress: bool = True
    """Show progress bars."""


def stack(observations: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.stack([o[key] for o in observations]) for key in observations[0]}


def collect_imitation_data(args: GNNArgs) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Observations and teacher scores along teacher (and noisy-teacher) trajectories."""
    observations, targets = [], []
    for k, load in enumerate(args.imitation_loads):
        workload = make_workload(args.workload, load=load)
        teacher = make_policy(args.teacher, workload)
        teacher.reset(args.seed + k)
        noise = args.imitation_noise if k % 2 else 0.0
        for obs, target, _ in rollout(
            workload, teacher.scores, args.seed + k, args.imitation_slots, noise=noise
        ):
            observations.append(obs)
            targets.append(target)
    return stack(observations), np.stack(targets)


def imitation_loss(
    model: GNNScheduler, batch: dict[str, torch.Tensor], target: torch.Tensor
) -> torch.Tensor:
    """MSE to the teacher's scores squashed the same way as the model's (softsign), with
    candidates that cannot act this slot weighted down."""
    import torch

    from mabp_gym.envs.pyg import to_pyg

    scores, _ = model.forward_graph(to_pyg(batch))
    weight = 0.1 + 0.9 * batch["action_mask"].float()
    return (weight * (scores - torch.nn.functional.softsign(target)) ** 2).mean()


def fit_imitation(
    model: GNNScheduler,
    data: dict[str, np.ndarray],
    targets: np.ndarray,
    args: GNNArgs,
    device: str,
    start_epoch: int,
    save: Any,
) -> list[float]:
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    tensors = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
    target = torch.as_tensor(targets, dtype=torch.float32, device=device)
    generator = torch.Generator().manual_seed(args.seed)
    losses = []
    epochs = range(start_epoch, args.imitation_epochs)
    if args.progress:
        from tqdm import tqdm

        epochs = tqdm(epochs, desc="imitation", unit="epoch")
    for epoch in epochs:
        order = torch.randperm(len(target), generator=generator).to(device)
        total = 0.0
        for start in range(0, len(order), args.batch_size):
            index = order[start : start + args.batch_size]
            loss = imitation_loss(model, {k: v[index] for k, v in tensors.items()}, target[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(index)
        losses.append(total / len(order))
        save(epoch + 1)
    return losses


def training_seeds(args: GNNArgs) -> set[int]:
    """Every seed a training episode starts from: the imitation episodes' and PPO's envs'."""
    imitation = {args.seed + k for k in range(len(args.imitation_loads))}
    return imitation | {args.seed + PPO_SEED_OFFSET + r for r in range(args.ppo_envs)}


def quick_stable_load(checkpoint: Path, args: GNNArgs, loads: list[float]) -> float:
    from mabp_gym.harness.evaluation import evaluate
    from mabp_gym.harness.summaries import stable_load

    records = evaluate(
        "gnn",
        args.workload,
        loads=loads,
        seeds=SELECTION_SEEDS,
        policy_kw={"checkpoint": str(checkpoint)},
        backend="serial",
    )
    summary = stable_load(records)["gnn"]
    backlog = float(np.mean([r["mean_backlog"] for r in records]))
    return summary - 1e-4 * backlog  # ties go to the smaller backlog


def train(args: GNNArgs) -> dict[str, Any]:
    import torch

    from mabp_gym.agents.gnn import (
        GNNScheduler,
        observation_dims,
        resolve_device,
        save_checkpoint,
    )

    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    device = resolve_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = make_workload(args.workload)
    encoder = ObservationEncoder(workload)
    model = GNNScheduler(
        observation_dims(encoder.layout), hidden=args.hidden, layers=args.layers
    ).to(device)
    imitation_path = out / "gnn_imitation.pt"
    command = command_line("gnn", args)

    start_epoch, ppo_zip, ppo_start = _resume_point(args, model, workload, device)

    def save_imitation(epoch: int) -> None:
        save_checkpoint(
            imitation_path,
            model.cpu(),
            workload,
            epoch=epoch,
            phase="imitation",
            args=dataclasses.asdict(args),
            command=command,
        )
        model.to(device)

    # -- imitation -----------------------------------------------------------------------------
    losses: list[float] = []
    from_ppo = ppo_zip is not None or ppo_start > 0
    if start_epoch < args.imitation_epochs:
        data, targets = collect_imitation_data(args)
        losses = fit_imitation(model, data, targets, args, device, start_epoch, save_imitation)
    elif not from_ppo and not imitation_path.exists():
        save_imitation(start_epoch)  # the resumed imitation checkpoint, finished

    # -- PPO -------------------------------------------------------------------------------------
    final_path = out / f"gnn_{workload.name}.pt"
    ppo_steps_done = 0
    candidates = {"imitation": imitation_path} if imitation_path.exists() else {}
    if args.ppo_steps > 0:
        ppo_path, ppo_steps_done = _ppo(
            args, model, device, out, ppo_zip, workload, command, ppo_start
        )
        candidates["ppo"] = ppo_path

    # -- model selection on held-out seeds, then the report ------------------------------------
    chosen, scores = _select(args, workload, candidates, final_path, ppo_steps_done, command)

    from mabp_gym.harness.evaluation import evaluate
    from mabp_gym.harness.summaries import stable_load

    records = evaluate(
        "gnn",
        args.workload,
        loads=args.eval_loads,
        seeds=final_eval_seeds(args.eval_seeds),
        policy_kw={"checkpoint": str(final_path)},
        output=out / "eval.jsonl",
    )
    report = {
        "checkpoint": str(final_path),
        "selected": chosen,
        "selection": scores,
        "imitation_losses": losses,
        "ppo_steps": ppo_steps_done,
        "device": device,
        "stable_load": stable_load(records)["gnn"],
        "wall_s": time.perf_counter() - started,
        "command": command,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _resume_point(
    args: GNNArgs, model: Any, workload: Any, device: str
) -> tuple[int, Path | None, int]:
    """Where a ``--resume`` run starts: the imitation epoch, the PPO archive (or None) and
    the PPO step count; a ``.pt`` checkpoint's weights are loaded into ``model``.

    From imitation: continue its epochs. From PPO (its archive, or gnn_ppo.pt): continue
    its step count, with no imitation candidate unless this run's --out holds one (the
    weights are PPO's: saved as "imitation" they were relabelled, or untrained ones chosen)."""
    if not args.resume:
        return 0, None, 0
    resume = Path(args.resume)
    if resume.suffix == ".zip":
        return args.imitation_epochs, resume, 0
    from mabp_gym.agents.gnn import load_checkpoint

    resumed, info = load_checkpoint(resume, workload, device)
    model.load_state_dict(resumed.state_dict())
    if info.get("phase") == "ppo":
        return args.imitation_epochs, None, int(info.get("steps", 0))
    return int(info.get("epoch", args.imitation_epochs)), None, 0


def _select(
    args: GNNArgs,
    workload: Any,
    candidates: dict[str, Path],
    final_path: Path,
    ppo_steps: int,
    command: str,
) -> tuple[str, dict[str, float]]:
    """Keep the candidate (imitation or PPO) with the higher stable load on held-out seeds
    as the final checkpoint, recording the choice; returns it and every score."""
    from mabp_gym.agents.gnn import load_checkpoint, save_checkpoint

    scores = {
        name: quick_stable_load(path, args, args.select_loads) for name, path in candidates.items()
    }
    chosen = max(scores, key=lambda name: scores[name])
    chosen_model, chosen_info = load_checkpoint(candidates[chosen], workload)
    notes = {
        k: v
        for k, v in chosen_info.items()
        if k not in ("dims", "hidden", "layers", "workload", "shape", "workload_identity")
    }
    save_checkpoint(
        final_path,
        chosen_model,
        workload,
        **{
            **notes,
            "selected": chosen,
            "selection": scores,
            "ppo_steps": ppo_steps,
            "command": command,
        },
    )
    return chosen, scores


def _ppo(
    args: GNNArgs,
    model: GNNScheduler,
    device: str,
    out: Path,
    resume: Path | None,
    workload,
    command: str,
    start_steps: int = 0,
) -> tuple[Path, int]:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from mabp_gym.agents.gnn import save_checkpoint
    from mabp_gym.agents.gnn_sb3 import GNNActorCriticPolicy

    def make(rank: int):
        def thunk():
            env = gym.make("mabp_gym/SFMSN-v0", workload=args.workload, load=args.ppo_load)
            env.reset(seed=args.seed + PPO_SEED_OFFSET + rank)
            return env

        return thunk

    envs = DummyVecEnv([make(rank) for rank in range(args.ppo_envs)])
    ppo_path = out / "gnn_ppo.pt"

    class Checkpoint(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = 0

        def _on_step(self) -> bool:
            if self.num_timesteps - self.last >= args.checkpoint_every:
                self.last = self.num_timesteps
                _save_archive(self.model, out / "ppo_checkpoint.zip", workload, args)
            return True

    # tensorboard is a dependency of the package; SB3 writes the PPO curves there.
    tensorboard = str(out / "tensorboard")
    if resume is not None:
        agent = PPO.load(
            resume, env=envs, device=device, custom_objects=_ppo_archive_objects(resume, envs, args)
        )
        agent.tensorboard_log = tensorboard  # this run's --out, not the archive's
    else:
        agent = PPO(
            GNNActorCriticPolicy,
            envs,
            learning_rate=args.ppo_learning_rate,
            n_steps=args.ppo_rollout,
            batch_size=min(256, args.ppo_rollout * args.ppo_envs),
            n_epochs=4,
            gamma=0.99,
            seed=args.seed + PPO_SEED_OFFSET,  # SB3 reseeds env r to this + r
            device=device,
            tensorboard_log=tensorboard,
            verbose=0,
            policy_kwargs={"hidden": args.hidden, "layers": args.layers},
        )
        agent.policy.gnn.load_state_dict(model.state_dict())  # type: ignore[union-attr]
        agent.num_timesteps = start_steps  # resumed from gnn_ppo.pt: its steps count
    remaining = args.ppo_steps - agent.num_timesteps
    if remaining > 0:
        agent.learn(
            remaining,
            callback=Checkpoint(),
            reset_num_timesteps=False,
            progress_bar=args.progress,
            tb_log_name=f"gnn_seed{args.seed}",
        )
    _save_archive(agent, out / "ppo_checkpoint.zip", workload, args)
    gnn = agent.policy.gnn
    save_checkpoint(
        ppo_path,
        gnn.cpu(),
        workload,
        phase="ppo",
        steps=agent.num_timesteps,
        args=dataclasses.asdict(args),
        command=command,
    )
    return ppo_path, int(agent.num_timesteps)


def archive_meta(workload: Any, args: GNNArgs) -> dict[str, Any]:
    """What a PPO archive must match to be resumed: the workload and the PPO settings that
    its saved state fixes (SB3 keeps the archive's rollout and batch sizes)."""
    from mabp_gym.agents.checkpoint_file import workload_identity

    return {
        "workload_identity": workload_identity(workload),
        "ppo_rollout": args.ppo_rollout,
        "ppo_envs": args.ppo_envs,
        "hidden": args.hidden,
        "layers": args.layers,
    }


def _save_archive(agent: Any, path: Path, workload: Any, args: GNNArgs) -> None:
    """``agent.save`` with :data:`ARCHIVE_META` added, written to a partial file and
    renamed over ``path``: a write cut short leaves the last good archive (it had destroyed
    it, and the resume then failed inside torch)."""
    import os
    import zipfile

    partial = path.with_name(path.name + ".partial.zip")
    agent.save(partial)
    with zipfile.ZipFile(partial, "a") as archive:
        archive.writestr(ARCHIVE_META, json.dumps(archive_meta(workload, args)))
    os.replace(partial, path)


def _ppo_archive_objects(path: Path, envs: Any, args: GNNArgs) -> dict[str, Any]:
    """Replacements for every cloudpickled field of a Stable-Baselines3 archive, so that
    ``PPO.load`` unpickles none of them (cloudpickle can run code); an archive with a
    pickled field PPO does not write is refused. The episode state (last observation,
    episode statistics) is dropped: training resumes from a reset of the fresh envs."""
    from mabp_gym.agents.gnn_sb3 import GNNActorCriticPolicy

    data = _archive_data(path, str(path))
    replacements = {
        "policy_class": GNNActorCriticPolicy,
        "observation_space": envs.observation_space,
        "action_space": envs.action_space,
        "rollout_buffer_class": None,
        "clip_range": 0.2,
        "lr_schedule": lambda _: args.ppo_learning_rate,
        "_last_obs": None,
        "_last_episode_starts": None,
        "_last_original_obs": None,
        "ep_info_buffer": None,
        "ep_success_buffer": None,
    }
    assert set(replacements) == set(REPLACED_FIELDS)
    _check_archive_fields(data, str(path))
    return {key: replacements[key] for key in data if _pickled(data[key])}


REPLACED_FIELDS = (
    "policy_class",
    "observation_space",
    "action_space",
    "rollout_buffer_class",
    "clip_range",
    "lr_schedule",
    "_last_obs",
    "_last_episode_starts",
    "_last_original_obs",
    "ep_info_buffer",
    "ep_success_buffer",
)
"""The cloudpickled fields of a PPO archive, each replaced on resume (none is unpickled)."""


def _check_archive_fields(data: dict[str, Any], where: str) -> None:
    """Refuse pickled fields PPO does not write, and a replaced field in another form (a
    plain value would be used as it stands)."""
    unknown = sorted(k for k, v in data.items() if _pickled(v) and k not in REPLACED_FIELDS)
    if unknown:
        raise ValueError(f"{where}: refused: pickled fields {unknown} that PPO does not write")
    plain = sorted(k for k in REPLACED_FIELDS if data.get(k) is not None and not _pickled(data[k]))
    if plain:
        raise ValueError(f"{where}: refused: fields {plain} are not as PPO writes them")


def _pickled(value: Any) -> bool:
    """Whether an archive's ``data`` field holds a cloudpickled object (SB3's form)."""
    return isinstance(value, dict) and ":serialized:" in value


def _archive_data(path: Path, where: str) -> dict[str, Any]:
    """The ``data`` member of a Stable-Baselines3 archive: a JSON object."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{where}: not a Stable-Baselines3 archive ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{where}: not a Stable-Baselines3 archive (its data is a JSON "
            f"{type(data).__name__}, not an object)"
        )
    return data


def _check_archive_tensors(path: Path, where: str) -> None:
    """Every ``.pth`` member must load as tensors alone (``weights_only``): a pickle that
    would run code, or bytes that are no torch file, are refused before any work."""
    import io
    import pickle
    import warnings
    import zipfile

    import torch

    with zipfile.ZipFile(path) as archive:
        for name in (n for n in archive.namelist() if n.endswith(".pth")):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.load(
                        io.BytesIO(archive.read(name)), map_location="cpu", weights_only=True
                    )
            except pickle.UnpicklingError:
                raise ValueError(
                    f"{where}: member {name!r} holds objects other than tensors, which torch's "
                    "weights_only load refuses (it could run code); not an archive PPO wrote"
                ) from None
            except Exception as error:  # noqa: BLE001 - torch raises many kinds for bad bytes
                raise ValueError(
                    f"{where}: member {name!r} is not a torch file "
                    f"({type(error).__module__}.{type(error).__qualname__})"
                ) from None


def validate(args: GNNArgs) -> None:
    """Raise ``ValueError`` naming the first bad argument, before any work starts (and
    before torch loads: the device is checked after every other argument)."""
    check_network(args.workload)
    teachers = ("mabp", "oracle-sur")
    if args.teacher not in teachers:
        raise ValueError(f"--teacher must be one of {teachers}, got {args.teacher!r}")
    require_at_least(
        args,
        1,
        "imitation_slots",
        "imitation_epochs",
        "batch_size",
        "hidden",
        "layers",
        "ppo_envs",
        "ppo_rollout",
        "checkpoint_every",
        "eval_seeds",
        "threads",
    )
    require_at_least(args, 0, "ppo_steps")
    check_loads(args, "imitation_loads", "select_loads", "eval_loads")
    check_number(args.ppo_load, "--ppo-load", low=0.0, high=10.0)
    check_number(args.imitation_noise, "--imitation-noise", low=0.0)
    for name in ("learning_rate", "ppo_learning_rate"):
        check_number(getattr(args, name), f"--{name.replace('_', '-')}", low=0.0, low_open=True)
    check_seeds(args)
    from mabp_gym.agents.gnn import resolve_device  # the first to load torch

    resolve_device(args.device)
    check_out_dir(args.out)
    if args.resume and not Path(args.resume).is_file():
        raise ValueError(f"--resume: no such file {args.resume!r}")
    if args.resume:
        check_resume(Path(args.resume), args)


def check_seeds(args: GNNArgs) -> None:
    """Refuse training seeds that the checkpoint choice, the final evaluation or the
    benchmark use."""
    check_held_out(
        args.seed,
        training_seeds(args),
        {
            "the checkpoint choice's": SELECTION_SEEDS,
            "the final evaluation's": final_eval_seeds(args.eval_seeds),
        },
        f"imitation --seed + k, PPO --seed + {PPO_SEED_OFFSET} + r",
    )


SB3_ARCHIVE_MEMBERS = ("data", "policy.pth")
"""Members every Stable-Baselines3 archive holds (``PPO.save``)."""


def check_resume(path: Path, args: GNNArgs) -> None:
    """Refuse a ``--resume`` file before any work: a ``.zip`` must be a Stable-Baselines3
    archive of this trainer (:data:`ARCHIVE_META`) for this workload and PPO settings,
    anything else a GNN checkpoint of this workload and size (read and verified).

    Raises:
        ValueError: naming the file and what is wrong with it.
    """
    from mabp_gym.agents.checkpoint_file import check_workload
    from mabp_gym.agents.gnn import load_checkpoint

    where = f"--resume {str(path)!r}"
    workload = make_workload(args.workload)
    from_ppo = path.suffix == ".zip"
    if from_ppo:
        stored = _archive_meta_of(path, where)
        _check_archive_fields(_archive_data(path, where), where)
        _check_archive_tensors(path, where)
        check_workload(stored, workload, path)
        wanted = archive_meta(workload, args)
        for key in ("ppo_rollout", "ppo_envs", "hidden", "layers"):
            if stored.get(key) != wanted[key]:
                raise ValueError(
                    f"{where}: made with --{key.replace('_', '-')} {stored.get(key)}, given "
                    f"{wanted[key]}; the archive fixes it (give the same, or start afresh)"
                )
    else:
        _, info = load_checkpoint(path, workload)
        for key in ("hidden", "layers"):
            if key in info and info[key] != getattr(args, key):
                raise ValueError(
                    f"{where}: its network has --{key} {info[key]}, given {getattr(args, key)}"
                )
        from_ppo = info.get("phase") == "ppo"
    if from_ppo and args.ppo_steps <= 0:
        raise ValueError(f"{where}: a PPO checkpoint continues PPO; give --ppo-steps > 0")


def _archive_meta_of(path: Path, where: str) -> dict[str, Any]:
    """The :data:`ARCHIVE_META` of a sound Stable-Baselines3 archive made by this trainer."""
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ValueError(f"{where}: not a zip archive (PPO.save writes one)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            damaged = archive.testzip()  # a member whose bytes do not match its CRC
            meta = archive.read(ARCHIVE_META) if ARCHIVE_META in names else None
    except (OSError, zipfile.BadZipFile) as error:
        raise ValueError(f"{where}: not a readable zip archive ({error})") from None
    missing = [m for m in SB3_ARCHIVE_MEMBERS if m not in names]
    if missing:
        raise ValueError(f"{where}: not a Stable-Baselines3 archive (no {missing})")
    if meta is None:
        raise ValueError(
            f"{where}: the archive records no workload (made before mabp-gym recorded it, or "
            "not by `mabp-gym train gnn`); resume from the run's gnn_ppo.pt instead"
        )
    if damaged is not None:
        raise ValueError(f"{where}: damaged archive (member {damaged!r} fails its checksum)")
    try:
        stored = json.loads(meta)
    except ValueError:
        stored = None
    if not isinstance(stored, dict):
        raise ValueError(f"{where}: its {ARCHIVE_META} is not a JSON object")
    return stored


def parse(argv: list[str] | None = None) -> GNNArgs:
    """The arguments of ``mabp-gym train gnn``, validated."""
    return parse_into(GNNArgs, "mabp-gym train gnn", __doc__, validate, argv)


def report(result: dict[str, Any]) -> None:
    print(json.dumps({k: v for k, v in result.items() if k != "imitation_losses"}, indent=2))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    result = train(parse(argv))
    report(result)
    return result


if __name__ == "__main__":
    main()
