"""Checkpoint layout and the driver's share of a checkpoint.

    {save_dir}/iter_0000012/trainer/        backend.save(): model (HF safetensors), optimizer, step
    {save_dir}/iter_0000012/driver.json     next rollout id, RNG state, data position
    {save_dir}/latest                       name of the newest *complete* checkpoint

`latest` is replaced atomically only after both parts are written, so a run killed while saving
resumes from the previous complete checkpoint, never from a half-written one.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

LATEST = "latest"


@dataclass
class DriverState:
    next_rollout: int          # first rollout id still to run
    data_state: dict           # PromptDataset.state_dict(): epoch and position
    python_rng: list           # random.getstate(), JSON-friendly
    torch_rng: list[int]       # torch.get_rng_state() bytes

    @classmethod
    def capture(cls, next_rollout: int, data_state: dict) -> DriverState:
        import torch

        state = random.getstate()
        return cls(next_rollout, data_state, [state[0], list(state[1]), state[2]], torch.get_rng_state().tolist())

    def restore_rng(self) -> None:
        import torch

        v, internal, gauss = self.python_rng
        random.setstate((v, tuple(internal), gauss))
        torch.set_rng_state(torch.tensor(self.torch_rng, dtype=torch.uint8))


def iter_dir(save_dir: str | Path, rollout_id: int) -> Path:
    return Path(save_dir) / f"iter_{rollout_id:07d}"


def trainer_dir(ckpt: Path) -> Path:
    return ckpt / "trainer"


def hf_model_dir(ckpt: Path) -> Path:
    """The trainer's weights as an HF model dir (save_pretrained), where the torch backend writes them; with the
    tokenizer beside them (an SFT run's checkpoints) it is a checkpoint.hf another run can start from."""
    return trainer_dir(ckpt) / "model"


def write_driver_state(ckpt: Path, state: DriverState) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "driver.json").write_text(json.dumps(asdict(state)))


def mark_latest(save_dir: str | Path, ckpt: Path) -> None:
    tmp = Path(save_dir) / (LATEST + ".tmp")
    tmp.write_text(ckpt.name)
    os.replace(tmp, Path(save_dir) / LATEST)  # atomic on POSIX


def find_latest(save_dir: str | Path) -> Path | None:
    """The newest complete checkpoint under save_dir (or save_dir itself when it is an iter_*
    dir), or None when there is none."""
    if (Path(save_dir) / "driver.json").is_file():
        return Path(save_dir)
    pointer = Path(save_dir) / LATEST
    if not pointer.is_file():
        return None
    ckpt = Path(save_dir) / pointer.read_text().strip()
    if not (ckpt / "driver.json").is_file():
        raise FileNotFoundError(f"{pointer} names {ckpt.name}, but {ckpt}/driver.json is missing; the checkpoint "
                                f"dir was changed by hand. Fix: point {pointer} at a complete iter_* dir or delete it")
    return ckpt


def prune(save_dir: str | Path, keep: int) -> list[Path]:
    """Deletes the iter_* dirs older than the newest `keep` complete checkpoints (half-written ones
    among them too); returns what it deleted. The checkpoint `latest` names is always among the kept."""
    save_dir = Path(save_dir)
    iters = sorted((p for p in save_dir.glob("iter_*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    complete = [p for p in iters if (p / "driver.json").is_file()]
    if len(complete) <= keep:
        return []
    oldest_kept = int(complete[-keep].name[5:])
    latest = (save_dir / LATEST).read_text().strip() if (save_dir / LATEST).is_file() else None
    gone = [p for p in iters if int(p.name[5:]) < oldest_kept and p.name != latest]
    for p in gone:
        shutil.rmtree(p)
    return gone


def read_driver_state(ckpt: Path) -> DriverState:
    return DriverState(**json.loads((ckpt / "driver.json").read_text()))
