"""slime's `--sglang-*` flags resolved against the pinned SGLang ServerArgs (rlrun.rollout.engines.sglang.schema):
the field name, its typed value, and what slime's argparse would have done with an abbreviation.

slime registers every ServerArgs flag with a `--sglang-` prefix and argparse accepts unique
abbreviations, so `--sglang-mem-frac 0.7` silently means `--sglang-mem-fraction-static 0.7` there.
rlrun imports the field it means and says so; a flag that names no field is reported with a did-you-mean.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

PREFIX = "--sglang-"
# slime's own --sglang-* flags, not ServerArgs (they have rows in slime_table.py or no rlrun setting).
SLIME_OWN = frozenset({"--sglang-router-ip", "--sglang-router-port", "--sglang-config",
                       "--sglang-server-concurrency", "--sglang-router-request-timeout-secs"})
# ServerArgs fields that rlrun sets from a typed setting: the import writes that setting instead.
TYPED = {"mem_fraction_static": "rollout.mem_fraction_static", "context_length": "rollout.context_length"}


@dataclass(frozen=True)
class SglangFlag:
    field: str | None  # the ServerArgs field, None when the flag names none
    value: Any
    note: str  # why the flag was read the way it was ("" when it is plain)


@lru_cache(maxsize=1)
def _flags() -> dict[str, tuple[str, dict]]:
    from rlrun.rollout.engines.sglang.schema import server_args_schema  # json only: no sglang, torch or ray

    schema = server_args_schema()
    out: dict[str, tuple[str, dict]] = {}
    for name, spec in schema["fields"].items():
        cli = spec.get("cli") or {}
        for flag in (cli.get("flag"), *(cli.get("aliases") or [])):
            if flag and flag.startswith("--"):
                out[flag] = (name, spec)
    # older spellings SGLang still parses (e.g. --cuda-graph-bs, renamed cuda_graph_bs_decode in 0.5.13):
    # kept under their own name, which rollout.sglang accepts and passes on as the same flag
    for name, cli in schema["renamed"].items():
        out.setdefault(cli["flag"], (name, {"cli": cli, "type": schema["fields"][cli["field"]]["type"]}))
    return out


def _typed(text: str, annotation: str) -> Any:
    if "bool" in annotation:
        return text.lower() in ("1", "true", "yes")
    for name, typ in (("int", int), ("float", float)):
        if name in annotation:
            try:
                return typ(text)
            except ValueError:
                return text
    return text


def resolve(flag: str, values: tuple[str, ...]) -> SglangFlag:
    """`--sglang-X v...` -> the ServerArgs field and typed value slime would pass to SGLang."""
    flags = _flags()
    stem = "--" + flag[len(PREFIX):]
    note = ""
    if stem not in flags:
        candidates = [f for f in flags if f.startswith(stem)]
        if len(candidates) != 1:
            close = difflib.get_close_matches(stem, list(flags), n=1, cutoff=0.8)
            hint = f"; did you mean {PREFIX}{close[0][2:]}?" if close else ""
            return SglangFlag(None, None, f"not a flag of the pinned SGLang ServerArgs{hint}")
        note = f"abbreviation: slime's argparse expands it to {PREFIX}{candidates[0][2:]}"
        stem = candidates[0]
    name, spec = flags[stem]
    cli, annotation = spec.get("cli") or {}, spec.get("type") or ""
    if cli.get("action") in ("store_true", "store_false"):
        value: Any = cli["action"] == "store_true"
    elif cli.get("nargs") in ("+", "*") or annotation.startswith(("List", "Optional[List", "list")):
        value = [_typed(v, annotation) for v in values]
    else:
        value = _typed(values[0], annotation) if values else True
    return SglangFlag(name, value, note)
