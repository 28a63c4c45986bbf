"""Where a model profile's released weights are on this machine: the local Hugging Face cache, read by
its documented layout without importing huggingface_hub (rlrun plan stays light):

    $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
      models--{org}--{name}/refs/main            the commit the `main` revision points at
      models--{org}--{name}/snapshots/{commit}/  config.json, *.safetensors, tokenizer files

(https://huggingface.co/docs/huggingface_hub/guides/manage-cache). Nothing is downloaded here: the
preflight refuses a hub id that is not cached, with the download command as the fix.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def cached_snapshot(repo_id: str) -> Optional[str]:
    """The local snapshot dir of `repo_id`'s main revision holding a config.json, or None."""
    repo = cache_dir() / f"models--{repo_id.replace('/', '--')}"
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snap = repo / "snapshots" / commit
    return str(snap) if (snap / "config.json").is_file() else None


DOWNLOAD_CLI = "hf"  # huggingface_hub's CLI (its `huggingface-cli` is gone since huggingface_hub 1.0)


def download_command(repo_id: str | None = None) -> str:
    """The command that puts `repo_id` (or a model folder) into the local Hugging Face cache."""
    return f"{DOWNLOAD_CLI} download {repo_id or 'REPO_ID'}"
