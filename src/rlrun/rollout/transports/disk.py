"""rollout.weight_sync=disk: the trainer writes its weights as one safetensors file under the run dir and every
engine loads it (/update_weights_from_disk); verified by the file's sha256. auto picks it for colocation across
nodes (CUDA IPC does not cross nodes; the run dir must then be on a shared filesystem)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import TRANSPORTS, TransportKind

NAME = "disk"


def auto(cfg) -> bool:
    return cfg.train.colocate and cfg.train.num_nodes > 1


def rules(cfg) -> Iterator[Problem]:
    return iter(())  # any layout: the engines read a file (a shared filesystem across nodes)


def write(state: dict, path: str, keep: dict | None = None) -> None:
    """Trainer end: `state` (HF names) as path/model.safetensors, renamed into place (an engine never reads a
    half-written file). keep: unused (each write is whole)."""
    from safetensors.torch import save_file

    Path(path).mkdir(parents=True, exist_ok=True)
    tmp = Path(path) / "model.safetensors.tmp"
    save_file(state, str(tmp))
    tmp.replace(Path(path) / "model.safetensors")


def receive(engines, path: str, version: str, urls: list[str] | None = None) -> None:
    """Engine end: every engine of the group (or those at urls) loads the file as `version`."""
    engines.update_weights_from_disk(path, version, urls)


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, check="sha256", write=write,
                                         receive=receive))
