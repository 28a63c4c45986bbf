"""slime's `--eval-config FILE` -> rlrun's eval.datasets, each with its own sampling.

slime reads the YAML with OmegaConf (slime/utils/arguments.py `_resolve_eval_datasets`): `eval.defaults` and
`eval.datasets` (a list, or a mapping keyed by name), a dataset's own key winning over `defaults`, which wins over
the `--eval-*` / `--rollout-*` flags (slime/utils/eval_config.py `build_eval_dataset_configs`). rlrun keeps the
same order: a dataset's value here, else the eval section's (rlrun.config.derive), which the flags set. The keys
rlrun's eval datasets carry are KEYS; any other key is reported (not carried over), as an unknown key in
`defaults` stops slime.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# slime's per-dataset key -> rlrun's eval.datasets.N key
KEYS = {"name": "name", "path": "path", "rm_type": "rm_type", "n_samples_per_eval_prompt": "n_samples_per_prompt",
        "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "max_response_len": "max_response_len"}
# slime rm_hub types that are not rlrun rule types, and the slime function that scores them with rlrun's per-sample
# custom-reward signature fn(response, label, metadata) (rlrun.reward.custom): slime's own code, run unchanged
RM_HUB = {"ifbench": "slime.rollout.rm_hub.ifbench:compute_ifbench_reward"}


def read(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(eval.datasets entries, what cannot be carried over: one sentence each). ValueError where slime stops."""
    from omegaconf import OmegaConf

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the eval config {path!r} ({exc.__class__.__name__}); slime opens it from "
                         "its working directory: run the import from slime's checkout or give an absolute path")
    data = OmegaConf.to_container(OmegaConf.create(text), resolve=True)
    if not isinstance(data, dict):
        raise ValueError("--eval-config must contain a mapping at the root (slime raises the same)")
    ev = data.get("eval", data)
    if not isinstance(ev, dict):
        raise ValueError("--eval-config must define an `eval` mapping or be a mapping itself (slime raises the same)")
    defaults = dict(ev.get("defaults") or {})
    raw = ev.get("datasets")
    if isinstance(raw, dict):
        raw = [{"name": name, **(cfg or {})} for name, cfg in raw.items()]
    if not raw:
        raise ValueError("--eval-config does not define any datasets under `eval.datasets` (slime raises the same)")
    out, lost = [], []
    for item in raw:
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError("each evaluation dataset entry must include a `name` field (slime raises the same)")
        merged = {**defaults, **item}
        for key in sorted(set(merged) - set(KEYS)):
            lost.append(f"eval config key {key!r} (dataset {item['name']!r}): rlrun's eval datasets take "
                        f"{', '.join(KEYS)}; not carried over")
        ds = {KEYS[k]: merged[k] for k in KEYS if k in merged}
        if "path" not in ds:
            raise ValueError(f"eval dataset {item['name']!r} has no `path` (slime's EvalDatasetConfig needs one)")
        if isinstance(ds.get("rm_type"), str):
            ds["rm_type"] = RM_HUB.get(ds["rm_type"], ds["rm_type"])
        out.append(ds)
    return out, lost
