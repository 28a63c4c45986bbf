"""Megatron torch_dist checkpoints (megatron-core's dist_checkpointing) into rlrun's megatron GPTModel: the
format slime's `--ref-load` / `--load` folders hold (slime's tools/convert_hf_to_torch_dist.py writes it, and
Megatron-LM's training saves it). The folder layout is Megatron-LM's: `latest_checkpointed_iteration.txt` and
`iter_NNNNNNN/` holding `.metadata` and `__*.distcp` (rlrun.config.torch_dist finds the shard folder).

Megatron-LM saves `{"model": model.sharded_state_dict(), "optimizer": ..., "rng_state": ..., ...}`
(megatron/training/checkpointing.py generate_state_dict); the model's ShardedTensors are keyed by the module
path (`decoder.layers.self_attention.linear_qkv.weight`, layers stacked along a sharded axis), so a GPTModel of
the same architecture reads them at any TP/PP layout. Only the model part is read here (the optimizer and RNG
states are left in the folder: rlrun resumes its own checkpoints, rlrun.checkpoint)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def load_torch_dist(gpt, path: str | Path) -> Path:
    """Load the model weights of the torch_dist checkpoint at `path` into `gpt` (an rlrun megatron GPTModel built
    for the same architecture, parallel state initialised). Returns the shard folder read. Raises
    FileNotFoundError when `path` holds no torch_dist checkpoint, RuntimeError when weights are missing."""
    from megatron.core import dist_checkpointing

    from rlrun.config.torch_dist import dist_checkpoint_dir

    shards = dist_checkpoint_dir(path)
    if shards is None:
        raise FileNotFoundError(f"{path}: no Megatron torch_dist checkpoint (.metadata + __*.distcp, or "
                                "latest_checkpointed_iteration.txt + iter_*/)")
    loaded = dist_checkpointing.load({"model": gpt.sharded_state_dict(prefix="")}, str(shards))
    result = gpt.load_state_dict(loaded["model"], strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
    if missing:
        raise RuntimeError(f"{shards}: the torch_dist checkpoint lacks {len(missing)} weight(s) of the model, "
                           f"e.g. {missing[:3]}: it is another architecture than model.*")
    log.warning("loaded the model weights of the Megatron torch_dist checkpoint %s", shards)
    return shards


def save_torch_dist(gpt, path: str | Path, iteration: int = 0) -> Path:
    """Save `gpt`'s weights as Megatron-LM lays a torch_dist checkpoint out (the tracker file and
    iter_NNNNNNN/ with {"model": ...}): what slime's conversion writes, for tests and for handing a model to
    slime. Returns the shard folder."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    root = Path(path)
    shards = root / f"iter_{iteration:07d}"
    shards.mkdir(parents=True, exist_ok=True)
    dist_checkpointing.save({"model": gpt.sharded_state_dict(prefix="")}, str(shards))
    if not dist.is_initialized() or dist.get_rank() == 0:
        (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return shards
