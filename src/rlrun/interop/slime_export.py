"""Render a resolved rlrun config as a slime launch script: env exports from the hardware profile, the
flag arrays with slime's names, and the `ray job submit ... -- python3 train.py` line.

Settings slime has no flag for are written as comments (with the reason), never dropped silently.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Sequence

from rlrun.interop.slime_encode import encode
from rlrun.interop.slime_values import fmt, get_path
from rlrun.interop.slime_table import ARRAYS, DEFAULT_SUBMIT_ADDRESS, NO_FLAG

_INDENT = "   "


def _line(tokens: list[str]) -> str:
    return " ".join(shlex.quote(t) for t in tokens)


def _submit_address(cfg: dict) -> tuple[str, list[str]]:
    address = cfg["cluster"]["address"]
    if address and address.startswith(("http://", "https://")):
        return address, []
    if address in (None, "auto", "local"):
        return DEFAULT_SUBMIT_ADDRESS, []
    return DEFAULT_SUBMIT_ADDRESS, [
        f"cluster.address={address}: `ray job submit` talks to the Ray dashboard (port 8265); "
        f"set --address to that cluster's dashboard"]


def _ray_lines(cfg: dict, address: str) -> list[str]:
    """The Ray the job is submitted to: checked first (`ray job list` answers); with no cluster.address, a
    local head is started when none answers, as slime's own scripts do (`ray start --head --node-ip-address
    ${MASTER_ADDR} --num-gpus 8 --disable-usage-stats ...`, e.g. scripts/run-qwen3-4B.sh); a given address
    that does not answer stops the script (exit 2)."""
    probe = f"ray job list --address={shlex.quote(address)} >/dev/null 2>&1"
    if cfg["cluster"]["address"] in (None, "auto", "local"):
        gpus = cfg["hardware"]["gpus_per_node"]
        return ["# the Ray cluster: the one answering at the address below, else a local head started here",
                f"if ! {probe}; then",
                f"{_INDENT}ray start --head --node-ip-address \"${{MASTER_ADDR:-127.0.0.1}}\" --num-gpus {gpus} "
                "--disable-usage-stats --dashboard-host=0.0.0.0 --dashboard-port=8265",
                "fi", ""]
    return ["# the Ray cluster named by cluster.address must answer before anything is submitted",
            f"if ! {probe}; then",
            f"{_INDENT}echo {shlex.quote(f'no Ray dashboard answers at {address}: start the cluster first')} >&2",
            f"{_INDENT}exit 2",
            "fi", ""]


def _no_flag_comments(cfg: dict) -> list[str]:
    return [f"{path}={fmt(get_path(cfg, path))}: {why}" for path, why in NO_FLAG.items()]


def render_script(cfg: dict, source: str = "rlrun export slime") -> str:
    """The slime launch for `cfg` (a RunConfig dumped to a dict) as bash text."""
    enc = encode(cfg)
    address, address_notes = _submit_address(cfg)
    env = cfg["hardware"]["env"]
    out = [
        "#!/bin/bash",
        f"# slime launch for the rlrun run {cfg['run']['name']!r}, written by `{source}`.",
        "# rlrun settings slime has no flag for (kept here so that nothing is lost):",
        *[f"#   {c}" for c in _no_flag_comments(cfg) + address_notes],
        "",
        "set -euxo pipefail",
        "",
        f"# hardware={cfg['hardware']['name']} ({cfg['hardware']['vendor']})",
        *[f"export {k}={shlex.quote(str(v))}" for k, v in env.items()],
        "export PYTHONUNBUFFERED=1",
        "",
    ]
    for array in ARRAYS:
        out.append(f"{array}=(")
        out.extend(f"{_INDENT}# {c}" for c in enc.comments.get(array, []))
        out.extend(_INDENT + _line(tokens) for tokens in enc.arrays[array])
        out.append(")")
        out.append("")
    out.extend(_ray_lines(cfg, address))
    runtime_env = json.dumps({"env_vars": {**env, "PYTHONUNBUFFERED": "1"}})
    cmd = [
        f"ray job submit --address={shlex.quote(address)} \\",
        f"{_INDENT}--runtime-env-json={shlex.quote(runtime_env)} \\",
        f"{_INDENT}-- python3 {enc.entry} \\",
        *[f"{_INDENT}{_line(tokens)} \\" for tokens in enc.launch],
        *[f"{_INDENT}${{{array}[@]}} \\" for array in ARRAYS],
    ]
    cmd[-1] = cmd[-1][: -len(" \\")]
    out.extend(cmd)
    return "\n".join(out) + "\n"


def export_config(overrides: Sequence[str], config_dir: Any = None) -> str:
    """Compose + validate like `rlrun plan` does, then render. Raises rlrun.config.ConfigError."""
    from rlrun.config import load

    from rlrun.config.memory import engine_fraction, trainer_offload

    cfg = load(list(overrides), config_dir)
    shown = " ".join(["rlrun export slime", *overrides]).strip()
    raw = cfg.model_dump(mode="python")
    raw["train"]["offload"] = trainer_offload(cfg)[0]  # slime has no auto: the plan's decision (--offload-train)
    raw["rollout"]["mem_fraction_static"] = engine_fraction(cfg)[0]  # the same for --sglang-mem-fraction-static
    return render_script(raw, source=shown)
