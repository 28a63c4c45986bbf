"""Both directions of the slime mapping in slime_table.py: a resolved rlrun config (a plain dict) to slime
flag arrays, and slime's train.py arguments back to rlrun dotted-path values.

Decoding follows slime's semantics for absent flags (slime's or Megatron's default, or what
`slime_validate_args` derives), so that an imported config behaves as the script did, not as rlrun's
own defaults would. Everything that is not a known setting is kept in `Decoded.unknown` for the
caller to report; nothing is dropped silently.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlrun.interop.slime_table import (
    ALIASES, ARRAYS, ATTENTION_BACKEND, CONSTANT_FLAGS, ENTRY_ASYNC, FAMILY_FLAGS, KEEP, LAUNCH, MOE_FLAGS,
    ROWS, SECRET_FLAGS, Row, rows_by_flag,
)

# slime's own --sglang-* flags (not SGLang ServerArgs), which are rows or have no rlrun setting.
_SLIME_SGLANG_FLAGS = {"--sglang-router-ip", "--sglang-router-port", "--sglang-config"}
_ROPE_FLAGS = ("--use-rope-scaling", "--rotary-scaling-factor")
_POST_NORM_FLAGS = ("--post-self-attn-layernorm", "--post-mlp-layernorm")
_MOE_FREQ = re.compile(r"^\(?\s*\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\]\s*\*\s*\(?\s*(\d+)\s*\)?\s*\)?$")


@dataclass(frozen=True)
class Occ:
    """One flag on the command line with its values and where it came from (file:line (ARRAY))."""

    flag: str
    values: tuple[str, ...]
    where: str = ""


def parse_args(args: Iterable[Any]) -> list[Occ]:
    """Group argv words into flags: `--flag v1 v2` and `--flag=v`. Words before any flag are kept as
    a flag-less occurrence so that they are reported, not lost."""
    occs: list[Occ] = []
    flag, values, where = None, [], ""
    for arg in args:
        text, loc = (arg.text, arg.where) if hasattr(arg, "text") else (str(arg), "")
        if text.startswith("--") and len(text) > 2:
            if flag is not None or values:
                occs.append(Occ(flag or "", tuple(values), where))
            flag, _, value = text.partition("=")
            values, where = ([value] if "=" in text else []), loc
        else:
            values.append(text)
    if flag is not None or values:
        occs.append(Occ(flag or "", tuple(values), where))
    return [_canonical(o) for o in occs]


def _canonical(o: Occ) -> Occ:
    key = ALIASES.get((o.flag, o.values))
    return Occ(key[0], key[1], o.where) if key else o


def fmt(value: Any) -> str:
    """A value as slime's scripts write it: 1e-6 rather than 1e-06, True as a bare flag elsewhere."""
    if isinstance(value, float):
        text = repr(value)
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)
    return str(value)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def get_path(tree: dict, path: str) -> Any:
    node: Any = tree
    for key in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)  # a missing key here is an absent optional section, never a default
    return node


def slime_default(row: Row, values: dict[str, Any]) -> Any:
    """slime's value for an absent flag, given the other settings; KEEP when it cannot be known."""
    if callable(row.default):
        try:
            return row.default(values)
        except (KeyError, TypeError, ZeroDivisionError):
            return KEEP
    return row.default


# ----------------------------------------------------------------------------------------------------
# export: resolved config -> flags
# ----------------------------------------------------------------------------------------------------
@dataclass
class Encoded:
    arrays: dict[str, list[list[str]]]  # array -> flags, each [flag, *values]
    launch: list[list[str]]
    entry: str
    comments: dict[str, list[str]] = field(default_factory=dict)  # array -> comment lines


def flat_values(cfg: dict) -> dict[str, Any]:
    return {r.path: get_path(cfg, r.path) for r in ROWS}


def encode(cfg: dict) -> Encoded:
    values = flat_values(cfg)
    arrays: dict[str, list[list[str]]] = {a: [] for a in (*ARRAYS, LAUNCH)}
    comments: dict[str, list[str]] = {a: [] for a in ARRAYS}
    for row in ROWS:
        if row.section and get_path(cfg, row.section) is None:
            continue
        tokens = _encode_row(row, values[row.path], values)
        if tokens:
            arrays[row.array].append(tokens)
    _encode_model(cfg, arrays["MODEL_ARGS"])
    _encode_misc(cfg, arrays, comments)
    entry = ENTRY_ASYNC if cfg["train"]["async_train"] else "train.py"
    launch = arrays.pop(LAUNCH)
    return Encoded(arrays, launch, entry, comments)


def _encode_row(row: Row, value: Any, values: dict[str, Any]) -> list[str] | None:
    if value is None:
        return None
    default = slime_default(row, values)
    if not row.always and default is not KEEP and same(value, default):
        return None
    to_slime = dict(row.values)
    if row.type is int and isinstance(value, float):  # e.g. a float timeout for an int-typed slime flag
        value = math.ceil(value)
    if row.kind == "value":
        return [row.flag, fmt(to_slime.get(value, value))]
    if row.kind == "true":
        return [row.flag] if value else None
    if row.kind == "false":
        return None if value else [row.flag]
    if row.kind == "bool":
        return [row.flag] if value else ["--no-" + row.flag[2:]]
    if row.kind == "list":
        return [row.flag, *map(fmt, value)] if value else None
    raise ValueError(f"slime_table.py: row {row.path} has unknown kind {row.kind!r}")


def _encode_model(cfg: dict, out: list[list[str]]) -> None:
    m = cfg["model"]
    out[:0] = [[flag, *vals] for flag, vals in FAMILY_FLAGS.get(m["family"], ()) if flag == "--spec"]
    if m["num_query_groups"] != m["num_attention_heads"] and not m["mla"]:
        out.append(["--group-query-attention"])
        out.append(["--num-query-groups", str(m["num_query_groups"])])
    if not same(m["rope_scaling_factor"], 1.0):
        if m["family"] == "llama":
            out.append(["--use-rope-scaling"])
        out.append(["--rotary-scaling-factor", fmt(m["rope_scaling_factor"])])
    if m["post_norms"]:
        out.extend([[f] for f in _POST_NORM_FLAGS])
    out.extend([flag, *vals] for flag, vals in FAMILY_FLAGS.get(m["family"], ()) if flag != "--spec")
    if m["mla"]:
        out.append(["--multi-latent-attention"])
    if m["moe"]:
        k, layers = m["moe"]["first_k_dense"], m["num_layers"]
        if k:
            out.append(["--moe-layer-freq", f"[0]*{k}+[1]*{layers - k}"])
        out.extend([flag, *vals] for flag, vals in MOE_FLAGS)
    for array, flag, vals in CONSTANT_FLAGS:
        if array == "MODEL_ARGS":
            out.append([flag, *vals])


def _encode_misc(cfg: dict, arrays: dict[str, list[list[str]]], comments: dict[str, list[str]]) -> None:
    for array, flag, vals in CONSTANT_FLAGS:
        if array != "MODEL_ARGS":
            arrays[array].append([flag, *vals])
    if not cfg["model"]["mla"]:
        arrays[ATTENTION_BACKEND[0]].append([ATTENTION_BACKEND[1], *ATTENTION_BACKEND[2]])
    datasets = cfg["eval"]["datasets"]
    if datasets:
        arrays["EVAL_ARGS"].append(["--eval-prompt-data", *[x for d in datasets for x in (d["name"], d["path"])]])
    for d in datasets:
        if d["rm_type"] != cfg["data"]["rm_type"]:
            comments["EVAL_ARGS"].append(
                f"eval.datasets[{d['name']}].rm_type={d['rm_type']}: slime scores eval with --rm-type "
                f"({cfg['data']['rm_type']}) unless an --eval-config file says otherwise")
    wandb = cfg["logging"]["wandb"]
    if wandb["mode"] != "disabled":
        arrays["MISC_ARGS"].extend([["--use-wandb"], ["--wandb-mode", wandb["mode"]]])
        arrays["MISC_ARGS"].append(["--wandb-project", wandb["project"]])
        if wandb["entity"]:
            arrays["MISC_ARGS"].append(["--wandb-team", wandb["entity"]])
    for key, value in cfg["rollout"]["sglang"].items():
        flag = "--sglang-" + key.replace("_", "-")
        if value is True:
            arrays["SGLANG_ARGS"].append([flag])
        elif isinstance(value, (list, tuple)):
            arrays["SGLANG_ARGS"].append([flag, *map(fmt, value)])
        elif value not in (None, False):
            arrays["SGLANG_ARGS"].append([flag, fmt(value)])


# ----------------------------------------------------------------------------------------------------
# import: flags -> rlrun values
# ----------------------------------------------------------------------------------------------------
@dataclass
class Decoded:
    values: dict[str, Any]  # rlrun dotted path -> value slime would use (explicit or slime's default)
    explicit: set[str]  # paths set by a flag in the script
    unknown: list[tuple[Occ, str]]  # (flag, why) to report: unknown, unsupported or secret
    notes: list[str]


def known_flags() -> list[str]:
    flags = {r.flag for r in ROWS} | {"--no-" + r.flag[2:] for r in ROWS if r.kind == "bool"}
    flags |= {f for _, f, _ in CONSTANT_FLAGS} | {f for f, _ in MOE_FLAGS} | {ATTENTION_BACKEND[1]}
    flags |= {f for fl in FAMILY_FLAGS.values() for f, _ in fl}
    flags |= {"--group-query-attention", "--num-query-groups", "--multi-latent-attention", "--moe-layer-freq",
              "--eval-prompt-data", "--use-wandb", "--wandb-mode", "--wandb-project", "--wandb-team", "--offload",
              *_ROPE_FLAGS, *_POST_NORM_FLAGS}
    return sorted(flags)


def _typed(text: str, typ: type) -> Any:
    if typ is int:
        return int(float(text)) if re.fullmatch(r"-?\d+(\.0*)?", text) else int(text)
    if typ is float:
        return float(text)
    return text


def _guess(text: str) -> Any:
    """A --sglang-* value with its natural type (SGLang's argparse would type it)."""
    for typ in (int, float):
        try:
            return typ(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


class _Decoder:
    def __init__(self, occs: list[Occ], entry: str):
        self.occs = occs
        self.by_flag = rows_by_flag()
        self.values: dict[str, Any] = {"train.async_train": entry == ENTRY_ASYNC}
        self.explicit: set[str] = {"train.async_train"}
        self.unknown: list[tuple[Occ, str]] = []
        self.notes: list[str] = []
        self.seen: dict[str, Occ] = {}
        self.sglang: dict[str, Any] = {}
        self.datasets: list[dict] = []

    def set(self, path: str, value: Any, occ: Occ) -> None:
        if path in self.explicit and not same(self.values[path], value) and path != "train.async_train":
            self.notes.append(f"{occ.where}: {occ.flag} sets {path} again ({self.values[path]!r} -> {value!r}); "
                              "the last one wins, as in argparse")
        self.values[path] = value
        self.explicit.add(path)

    def run(self) -> Decoded:
        for occ in self.occs:
            try:
                self.one(occ)
            except ValueError as exc:
                self.unknown.append((occ, f"bad value: {exc}"))
        self.fill_defaults()
        if self.sglang:
            self.values["rollout.sglang"] = self.sglang
            self.explicit.add("rollout.sglang")
        return Decoded(self.values, self.explicit, self.unknown, self.notes)

    def one(self, occ: Occ) -> None:
        flag, vals = occ.flag, occ.values
        self.seen[flag] = occ
        if not flag:
            self.unknown.append((occ, "words before the first flag"))
        elif any("${" in v or "$(" in v for v in vals):
            self.unknown.append((occ, "its value is computed when the script runs (see the notes); "
                                      "write the value into the experiment by hand"))
        elif flag in SECRET_FLAGS:
            self.unknown.append((occ, "a credential: not copied into the config (set WANDB_API_KEY instead)"))
        elif flag == "--offload":  # slime: both --offload-train and --offload-rollout
            self.set("train.offload", True, occ)
            self.set("rollout.offload", True, occ)
        elif flag.startswith("--no-") and (row := self.by_flag.get("--" + flag[5:])) and row.kind == "bool":
            self.expect(occ, 0)
            self.set(row.path, False, occ)
        elif row := self.by_flag.get(flag):
            self.row(row, occ)
        elif not self.special(occ):
            self.unknown.append((occ, self.suggest(flag)))

    def expect(self, occ: Occ, n: int | None) -> None:
        if n is not None and len(occ.values) != n:
            raise ValueError(f"{occ.flag} takes {n} value(s), got {list(occ.values)}")

    def row(self, row: Row, occ: Occ) -> None:
        if row.kind == "value":
            self.expect(occ, 1)
            from_slime = {s: r for r, s in row.values}
            text = occ.values[0]
            if row.values and text not in from_slime:
                raise ValueError(f"{text!r} has no rlrun equivalent for {row.path}; rlrun knows {list(from_slime)}")
            self.set(row.path, from_slime.get(text) if row.values else _typed(text, row.type), occ)
        elif row.kind in ("true", "false", "bool"):
            self.expect(occ, 0)
            self.set(row.path, row.kind != "false", occ)
        elif row.kind == "list":
            self.set(row.path, list(occ.values), occ)

    def special(self, occ: Occ) -> bool:
        """Flags whose meaning spans settings (see slime_table.SPECIAL) or that rlrun fixes; True if known."""
        flag, vals = occ.flag, occ.values
        if flag == "--num-query-groups":
            self.expect(occ, 1)
            self.set("model.num_query_groups", int(vals[0]), occ)
        elif flag == "--rotary-scaling-factor":
            self.expect(occ, 1)
            self.set("model.rope_scaling_factor", float(vals[0]), occ)
        elif flag in _POST_NORM_FLAGS:
            self.set("model.post_norms", True, occ)
        elif flag == "--moe-layer-freq":
            self.moe_layer_freq(occ)
        elif flag == "--eval-prompt-data":
            if len(vals) % 2:
                raise ValueError("--eval-prompt-data takes NAME PATH pairs")
            self.datasets = [{"name": vals[i], "path": vals[i + 1]} for i in range(0, len(vals), 2)]
            self.explicit.add("eval.datasets")
        elif flag == "--use-wandb":
            self.expect(occ, 0)  # the mode is settled in fill_defaults: --wandb-mode may come later
        elif flag == "--wandb-mode":
            self.expect(occ, 1)
            self.set("logging.wandb.mode", vals[0], occ)
        elif flag in ("--wandb-project", "--wandb-team"):
            self.expect(occ, 1)
            self.set("logging.wandb." + ("project" if flag == "--wandb-project" else "entity"), vals[0], occ)
        elif flag.startswith("--sglang-") and flag not in _SLIME_SGLANG_FLAGS:
            key = flag[len("--sglang-"):].replace("-", "_")
            self.sglang[key] = True if not vals else _guess(vals[0]) if len(vals) == 1 else [_guess(v) for v in vals]
        else:
            return self.constant(occ)
        return True

    def constant(self, occ: Occ) -> bool:
        fixed = {f: v for _, f, v in CONSTANT_FLAGS} | {f: v for f, v in MOE_FLAGS}
        fixed |= {f: v for fl in FAMILY_FLAGS.values() for f, v in fl}
        fixed |= {ATTENTION_BACKEND[1]: ATTENTION_BACKEND[2], "--group-query-attention": (),
                  "--multi-latent-attention": (), "--use-rope-scaling": ()}
        if occ.flag not in fixed:
            return False
        if not _same_values(occ.values, fixed[occ.flag]):
            want = " ".join((occ.flag, *fixed[occ.flag]))
            self.unknown.append((occ, f"rlrun always uses `{want}`; this value is not carried over"))
        return True

    def moe_layer_freq(self, occ: Occ) -> None:
        self.expect(occ, 1)
        text = occ.values[0].replace(" ", "")
        if m := _MOE_FREQ.match(text):
            self.set("model.moe.first_k_dense", int(m.group(1)), occ)
        elif re.fullmatch(r"\[[01](,[01])*\]", text):
            bits = [int(b) for b in text[1:-1].split(",")]
            k = bits.index(1) if 1 in bits else len(bits)
            if any(b == 0 for b in bits[k:]):
                raise ValueError(f"{occ.values[0]!r}: rlrun models dense layers only before the first MoE layer")
            self.set("model.moe.first_k_dense", k, occ)
        elif text == "1":
            self.set("model.moe.first_k_dense", 0, occ)
        else:
            raise ValueError(f"{occ.values[0]!r} is not a layer pattern rlrun can read (e.g. '[0]*3+[1]*58'); "
                             "it is probably a variable the script computes in a loop")

    def suggest(self, flag: str) -> str:
        flags = known_flags()
        prefixed = [f for f in flags if f.startswith(flag)]
        if len(prefixed) == 1:
            return f"an abbreviation slime's argparse would expand to {prefixed[0]}; spell it out"
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"no rlrun setting for it (slime/Megatron flag passed through by the script){hint}"

    def fill_defaults(self) -> None:
        """What slime uses for absent flags, so that the import means what the script meant."""
        has_model = "model.num_layers" in self.explicit
        v = self.values
        if has_model:
            heads = v.get("model.num_attention_heads")
            v.setdefault("model.num_query_groups", heads)
            v.setdefault("model.rope_scaling_factor", 1.0)
            v.setdefault("model.post_norms", False)
            if "--num-experts" not in self.seen:
                v["model.moe"] = None
            elif "--moe-layer-freq" not in self.seen:  # absent: every layer is MoE (Megatron's default 1)
                v.setdefault("model.moe.first_k_dense", 0)
            if "--multi-latent-attention" not in self.seen:
                v["model.mla"] = None
        if self.datasets:
            v["eval.datasets"] = self.datasets  # rm_type is filled by the importer (data.rm_type)
        elif "eval.datasets" not in self.explicit:
            v["eval.datasets"] = []
        v.setdefault("logging.wandb.mode", "online" if "--use-wandb" in self.seen else "disabled")
        pending = [r for r in ROWS if r.path not in self.explicit and r.default is not KEEP]
        for row in pending:  # static defaults first: derived ones read them
            if (row.path.startswith("model.") and not has_model) or callable(row.default):
                continue
            if row.section and v.get(row.section, 0) is None:
                continue
            v[row.path] = row.default
        for row in pending:
            if row.section and v.get(row.section, 0) is None:
                continue
            if callable(row.default):
                value = slime_default(row, v)
                if value is not KEEP:
                    v[row.path] = value


def _same_values(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return len(a) == len(b) and all(same(_guess(x), _guess(y)) for x, y in zip(a, b))


def decode(occs: list[Occ], entry: str = "train.py") -> Decoded:
    return _Decoder(occs, entry).run()


# ----------------------------------------------------------------------------------------------------
# round trips: the script's flags as a set
# ----------------------------------------------------------------------------------------------------
def flag_set(args: Iterable[Any], entry: str = "train.py") -> set[tuple[str, tuple]]:
    """The flags of a train.py command line as a comparable set: values typed, paths replaced by a
    placeholder, and flags dropped whose value is what slime would use without them."""
    occs = parse_args(args)
    decoded = decode(occs, entry)
    by_flag = rows_by_flag()
    out: set[tuple[str, tuple]] = set()
    for occ in occs:
        flag = occ.flag
        negated = flag.startswith("--no-") and ("--" + flag[5:]) in by_flag
        row = by_flag.get("--" + flag[5:] if negated else flag)
        if row is None:
            out.add((flag, tuple(_guess(v) for v in occ.values)))
            continue
        value = decoded.values.get(row.path)
        default = slime_default(row, decoded.values)
        if default is not KEEP and same(value, default):
            continue
        shown = ("<path>",) if row.path_like else (value,) if row.kind in ("value", "bool") else tuple(occ.values)
        out.add((row.flag, tuple(float(x) if isinstance(x, int) and not isinstance(x, bool) else x
                                 for x in shown)))
    return out
