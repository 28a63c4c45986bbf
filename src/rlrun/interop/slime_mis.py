"""Import of slime's MIS example (examples/train_infer_mismatch_helper/mis.py, `compute_mis_weights_with_cp`
through `--custom-tis-function-path`): its settings live in the YAML of `--custom-config-path`, which slime's
`slime_validate_args` copies onto `args` (overriding the flags). They map onto rlrun's algo keys
(docs/algorithms.md, "slime parity"):

    tis_mode truncate | clip | mask   -> tis_mode truncate (tis_clip_low 0) | truncate (tis_clip_low = lower) | mask
    tis_upper_bound, tis_lower_bound  -> tis_clip, tis_clip_low (lower absent or null: 1 / upper, as mis.py)
    use_rs, rs_level, rs_*_bound      -> use_rs, rs_level, rs_clip_low, rs_clip (null: the TIS bounds)
    rs_veto_threshold                 -> rs_veto_threshold (mis.py reads it only with use_rs)
    tis_batch_normalize               -> tis_batch_normalize
A rejection (mask mode, use_rs, the veto) leaves every loss term in slime (loss.py rebuilds its reducer with
mis.py's mask): tis_reject_scope=all.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FUNCTIONS = frozenset({"examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp"})
MODES = {"truncate": "truncate", "clip": "truncate", "mask": "mask"}
# what mis.py reads from args whenever use_tis is on (an absent key is an AttributeError in slime)
NEEDED = ("tis_level", "tis_mode", "tis_upper_bound", "tis_lower_bound", "rs_lower_bound", "rs_upper_bound",
          "use_rs", "tis_batch_normalize")
KEYS = frozenset(NEEDED) | {"use_tis", "rs_level", "rs_veto_threshold"}


def read_config(path: str) -> dict[str, Any]:
    """The YAML as slime's train.py reads it: `open(path)` relative to the working directory."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the MIS config {path!r} ({exc.__class__.__name__}); slime opens it from "
                         "its working directory: run the import from slime's checkout or give an absolute path")
    if not isinstance(data, dict):
        raise ValueError(f"the MIS config {path!r} is not a mapping of settings")
    return data


def mis_values(cfg: dict[str, Any], use_tis_flag: bool) -> tuple[dict[str, Any], list[str]]:
    """rlrun values for a MIS config, and what cannot be carried over (each a sentence)."""
    use_tis = bool(cfg.get("use_tis", use_tis_flag))
    out: dict[str, Any] = {"algo.use_tis": use_tis}
    lost = [f"key {k!r}: not a setting of mis.py (not carried over)" for k in cfg if k not in KEYS]
    if not use_tis:  # mis.py then only computes metrics
        return out, lost
    missing = [k for k in NEEDED + (("rs_level",) if cfg.get("use_rs") else ()) if k not in cfg]
    if missing:
        return out, lost + [f"mis.py reads {', '.join(missing)} from the config, which lacks them (slime stops "
                            "with an AttributeError)"]
    if cfg["tis_mode"] not in MODES:
        return out, lost + [f"tis_mode {cfg['tis_mode']!r}: mis.py knows truncate, clip and mask"]
    upper = float(cfg["tis_upper_bound"])
    lower = float(cfg["tis_lower_bound"]) if cfg["tis_lower_bound"] is not None else 1.0 / upper
    out.update({"algo.tis_level": cfg["tis_level"], "algo.tis_mode": MODES[cfg["tis_mode"]], "algo.tis_clip": upper,
                "algo.tis_clip_low": 0.0 if cfg["tis_mode"] == "truncate" else lower,
                "algo.tis_batch_normalize": bool(cfg["tis_batch_normalize"])})
    if cfg["tis_batch_normalize"] and cfg["tis_level"] == "geometric":
        lost.append("tis_batch_normalize with tis_level geometric: mis.py raises ValueError (rlrun would average "
                    "one weight per sequence)")
    rejecting = cfg["tis_mode"] == "mask"
    if cfg["use_rs"]:
        rejecting = True
        rs = (cfg["rs_lower_bound"], cfg["rs_upper_bound"])
        out.update({"algo.use_rs": True, "algo.rs_level": cfg["rs_level"],
                    "algo.rs_clip_low": float(rs[0]) if rs[0] is not None else lower,
                    "algo.rs_clip": float(rs[1]) if rs[1] is not None else upper,
                    "algo.rs_veto_threshold": cfg.get("rs_veto_threshold")})
    out["algo.tis_reject_scope"] = "all" if rejecting else "pg"
    return out, lost
