"""rollout.weight_sync=delta: slime's delta / disk weight sync (--update-weight-mode delta --update-weight-transport
disk). The trainer publishes each sync as a version directory under rollout.delta.dir (the run dir's weight_sync/ by
default; a filesystem the engine hosts share): the first one full, then only the changed tensors' bytes, xor- or
overwrite-encoded, zstd-compressed, each with a checksum of its new bytes (rlrun.rollout.delta). Every engine host
pulls the versions into its host-local checkpoint rollout.delta.local_dir (checksum-verified) and the engine reloads it
through /update_weights_from_disk. The run's check is the disk transport's: the sha256 of the trainer's state against
the engines' (the hf engine), else the weight_version every engine reports. auto never picks it."""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.compose import primary_default
from rlrun.config.kinds import TRANSPORTS, TransportKind, chosen_transport
from rlrun.rollout.delta import CHECKSUM_MODULES

NAME = "delta"


def auto(cfg) -> bool:
    return False


def rules(cfg) -> Iterator[Problem]:
    d = cfg.rollout.delta
    module = CHECKSUM_MODULES.get(d.checksum)
    if module and importlib.util.find_spec(module) is None:
        yield Problem("rollout.delta.checksum", f"{d.checksum} needs the {module} package, which is not installed",
                      f"pip install {module}, or set rollout.delta.checksum=xxh3-128 (or adler32)", d.checksum)
    if importlib.util.find_spec("zstandard") is None:
        yield Problem("rollout.weight_sync", "delta weight sync compresses every version with zstd (the zstandard "
                      "package), which is not installed", "pip install zstandard (pyproject.toml pins it), or set "
                      "rollout.weight_sync=disk", NAME)
    for key in ("dir", "local_dir"):
        value = getattr(d, key)
        if value is not None and not Path(value).is_absolute():
            yield Problem(f"rollout.delta.{key}", f"{value!r} is relative: the trainer and the engines run in other "
                          "working directories", "give an absolute path", value)


def idle(cfg) -> Iterator[Problem]:
    """rollout.delta.* changed from its default (conf/config.yaml) while the run's transport is another: refused (it
    would be ignored)."""
    d = cfg.rollout.delta
    for key, default in primary_default("rollout.delta").items():
        if getattr(d, key) != default:
            yield Problem(f"rollout.delta.{key}", f"the delta transport's setting, and this run's transport is "
                          f"{chosen_transport(cfg)}" + (" (auto)" if cfg.rollout.weight_sync == "auto" else "") +
                          ": it would be ignored",
                          f"set rollout.weight_sync=delta, or drop rollout.delta.{key}", getattr(d, key))


def local_dir(cfg, run_dir) -> str:
    """rollout.delta.local_dir, or a directory under the engine host's temp dir named after the run."""
    return cfg.rollout.delta.local_dir or str(Path(tempfile.gettempdir()) / "rlrun-delta" / Path(run_dir).name)


def file_args(cfg, run_dir) -> dict:
    d = cfg.rollout.delta
    return {"encoding": d.encoding, "checksum": d.checksum, "dir": d.dir, "local_dir": local_dir(cfg, run_dir),
            "full_every": d.full_every}


def describe(cfg) -> str:
    d = cfg.rollout.delta
    return (f"{d.encoding}-encoded deltas, {d.checksum} per tensor, published to {d.dir or '<run dir>/weight_sync'}, "
            f"pulled into {d.local_dir or '<tmp>/rlrun-delta/<run>'} on each engine host; "
            + (f"a full version every {d.full_every} syncs, older ones deleted" if d.full_every else
               "every version kept"))


def write(state: dict, path: str, keep: dict | None = None, *, encoding: str = "xor", checksum: str = "xxh3-128",
          dir: str | None = None, local_dir: str | None = None, full_every: int = 0) -> None:
    """Trainer end: the next version of the stream under `dir` (or path). keep holds the Publisher (its snapshot of
    the bytes last published) across this rank's writes; keep None: a new stream, so a full version."""
    import torch

    from rlrun.rollout.delta import Publisher
    from rlrun.rollout.transports.disk import write as write_full

    keep = {} if keep is None else keep
    root = dir or path
    pub = keep.get("publisher")
    if pub is None or str(pub.root) != root or (pub.encoding, pub.checksum_format) != (encoding, checksum):
        pub = keep["publisher"] = Publisher(root, encoding, checksum, full_every)
    cpu = {n: t.detach().to("cpu").contiguous() for n, t in state.items()}
    arrays = {n: (t.reshape(-1).view(torch.uint8).numpy(), str(t.dtype), tuple(t.shape)) for n, t in cpu.items()}
    pub.publish(arrays, lambda out: write_full(cpu, str(out)))  # a full version is the disk transport's file
    keep["last"] = dict(pub.last)  # this write's counts, for a caller holding keep (the delta tests read them)


def receive(engines, path: str, version: str, urls: list[str] | None = None, *, dir: str | None = None,
            local_dir: str | None = None, **_settings) -> dict[str, float]:
    """Engine end: every engine (or those at urls) pulls the newest published version into its host's local
    checkpoint, then loads it as `version`. Returns the publish's metrics for the step's row: delta/bytes (what each
    host pulled: the version's files), delta/changed_frac (changed bytes / the state's bytes), delta/full (1: a full
    version)."""
    from rlrun.rollout.delta import published

    root = dir or path
    target = local_dir or str(Path(path) / "local")
    last = published(root)
    engines.pull_weights(target, root, int(last["version"]), urls)
    engines.update_weights_from_disk(target, version, urls)
    return {"delta/bytes": float(last["bytes"]), "delta/full": float(last["full"]),
            "delta/changed_frac": last["changed_bytes"] / max(last["total_bytes"], 1)}


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, check="sha256", write=write,
                                         receive=receive, file_args=file_args, describe=describe, idle=idle))
