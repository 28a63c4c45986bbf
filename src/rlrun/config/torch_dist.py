"""Megatron torch_dist checkpoints (megatron-core dist_checkpointing), as slime's `--ref-load` / `--load` point
at them: a folder with `.metadata` and `__*.distcp` shards, or a save folder with
`latest_checkpointed_iteration.txt` and `iter_NNNNNNN/` (or `release/`) folders holding those. Pure Python:
the preflight (`rlrun validate --check-paths`) reads it.

rlrun's trainers read Hugging Face weights. A torch_dist reference folder beside `checkpoint.hf` is, in slime's
recipes, the conversion of that HF model (slime's `tools/convert_hf_to_torch_dist.py`, as the Qwen3-4B
tutorial does), so the reference model is built from checkpoint.hf's weights and the run says so
(`ref_weights`)."""

from __future__ import annotations

from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"


def _is_shard_dir(p: Path) -> bool:
    return (p / ".metadata").is_file() and next(p.glob("__*.distcp"), None) is not None


def dist_checkpoint_dir(path: str | Path) -> Path | None:
    """The folder holding the torch_dist shards that `path` names (itself, the iteration its tracker file
    names, or its newest iter_* folder), or None when `path` is no torch_dist checkpoint."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return None
    if _is_shard_dir(p):
        return p
    tracker = p / TRACKER
    if tracker.is_file():
        text = tracker.read_text().strip()
        sub = p / ("release" if text == "release" else f"iter_{int(text):07d}") if text.isdigit() or \
            text == "release" else None
        return sub if sub is not None and _is_shard_dir(sub) else None
    iters = sorted(d for d in p.glob("iter_*") if d.is_dir() and _is_shard_dir(d))
    return iters[-1] if iters else None


def ref_weights(ref: str | None, hf: str | None) -> tuple[str | None, str | None]:
    """(the folder the reference model's weights are read from, a note to log or None)."""
    if ref is not None and hf is not None and dist_checkpoint_dir(ref) is not None:
        return hf, (f"checkpoint.ref {ref} is a Megatron torch_dist checkpoint, the conversion of checkpoint.hf in "
                    f"slime's recipes: the reference model is built from checkpoint.hf {hf}'s weights")
    return ref or hf, None
