"""Pick the rlrun config groups (model, algo, hardware, parallelism, data) that best match values decoded
from a slime script: the option whose values differ from the script's in the fewest settings wins.

Scoring merges each option's YAML onto the base composition with OmegaConf, as Hydra does for a
defaults-free group file (one compose per option would cost ~0.1 s each, 36 options per import); an
option file with a defaults list of its own is composed by Hydra for real. The final composition of the
chosen groups always goes through Hydra (slime_import.py).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.interop.slime_values import get_path, same

SCORED_GROUPS = ("model", "algo", "hardware", "parallelism", "data")
# Ties go to the first of these (the profiles slime's own recipes were written for).
PREFERRED = ("mi300x", "h100", "grpo", "tp1", "dapo-math-17k")
_ROCM_MARKERS = ("HIP_", "ROCR_", "HSA_", "RAY_EXPERIMENTAL_NOSET_HIP")


@dataclass(frozen=True)
class Choice:
    group: str
    option: str
    differing: tuple[str, ...]  # dotted paths where the option differs from the script
    runner_up: str | None
    # why this option, where the script sets none of the group's own settings (the score says nothing then)
    basis: str = ""


def vendor_of(env: dict[str, str]) -> str:
    """slime's ROCm scripts set HIP_*/ROCR_* variables; anything else is a CUDA machine."""
    return "rocm" if any(k.startswith(_ROCM_MARKERS) for k in env) else "cuda"


# (option file, its text, the base composition) -> the merged tree. A merge costs ~0.05 s (OmegaConf builds and
# copies the whole tree); a process that imports several scripts (scripts/slime_verdicts.py, the tests' catalogue)
# scores the same ~40 options against the same base each time.
_MERGED: dict[tuple[str, str, str], dict] = {}


def _option_tree(composer: Any, base: dict, group: str, option: str, dirs: list[Path]) -> dict:
    from omegaconf import OmegaConf

    for d in dirs:
        f = d / group / f"{option}.yaml"
        if f.is_file():
            text = f.read_text()
            key = (str(f.resolve()), text, json.dumps(base, sort_keys=True, default=str))
            if key not in _MERGED:
                node = OmegaConf.load(f)
                if "defaults" in node:
                    break
                glob = text.lstrip().startswith("# @package _global_")
                merged = OmegaConf.merge(OmegaConf.create(base), node if glob else {group: node})
                _MERGED[key] = OmegaConf.to_container(merged, resolve=True)  # type: ignore[assignment]
            return copy.deepcopy(_MERGED[key])  # the caller's own copy: the cached one never changes
    return composer.compose([f"{group}={option}"]).raw


def _differing(tree: dict, values: dict[str, Any]) -> list[str]:
    return [p for p, v in values.items() if not same(get_path(tree, p), v)]


def _env_differing(tree: dict, env: dict[str, str]) -> list[str]:
    profile = tree["hardware"]["env"]
    return [f"hardware.env.{k}" for k, v in env.items() if profile.get(k) != v]


def choose_groups(composer: Any, values: dict[str, Any], env: dict[str, str], dirs: list[Path],
                  forced: dict[str, str]) -> dict[str, Choice]:
    base = composer.compose([]).raw
    vendor = vendor_of(env)
    out: dict[str, Choice] = {}
    for group in SCORED_GROUPS:
        options = sorted(composer.group_options(group), key=lambda o: (o not in PREFERRED, o))
        if group in forced:
            options = [forced[group]]
        scored = []
        for option in options:
            tree = _option_tree(composer, base, group, option, dirs)
            if group == "hardware" and group not in forced and tree["hardware"]["vendor"] != vendor:
                continue
            diff = _differing(tree, values) + (_env_differing(tree, env) if group == "hardware" else [])
            scored.append((len(diff), option, tuple(diff)))
        if not scored:
            raise ValueError(f"no {group} option for a {vendor} machine among {options}; "
                             f"pick one with --{group} NAME")
        scored.sort(key=lambda s: s[0])  # stable: ties keep the preferred order
        basis = ""
        if group not in forced and not any(p.startswith(group + ".") for p in values):
            scored, basis = _unscored(group, scored, composer, base, dirs, values)
        best = scored[0]
        out[group] = Choice(group, best[1], best[2], scored[1][1] if len(scored) > 1 else None, basis)
    return out


def _unscored(group: str, scored: list, composer: Any, base: dict, dirs: list[Path],
              values: dict[str, Any]) -> tuple[list, str]:
    """The script sets none of the group's settings (a model without its scripts/models/*.sh): the options tie
    on what they set; a model whose hub id names the script's --hf-checkpoint folder goes first."""
    why = f"the script sets no {group}.* setting"
    hf = values.get("checkpoint.hf")
    if group == "model" and isinstance(hf, str) and hf.strip("/"):
        folder = Path(hf.rstrip("/")).name.lower()
        named = [s for s in scored
                 if str(_option_tree(composer, base, group, s[1], dirs)["model"].get("hub_id") or "")
                 .rsplit("/", 1)[-1].lower() == folder]
        if named:
            return named + [s for s in scored if s not in named], \
                f"{why}: the model whose hub id names --hf-checkpoint {hf}; pass --model NAME to choose another"
    return scored, f"{why}: a guess; pass --{group} NAME"
