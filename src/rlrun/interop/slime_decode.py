"""slime's train.py arguments -> rlrun dotted-path values, with slime's semantics for absent flags (slime's
or Megatron's default, or what `slime_validate_args` derives), so that an imported config behaves as the
script did. Everything that is not a known setting lands in `Decoded.unknown` for the caller to report;
nothing is dropped silently. `flag_set` makes two command lines comparable for round-trip checks."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlrun.interop import slime_agent, slime_eval, slime_mis, slime_modes, slime_weight_sync
from rlrun.interop import slime_sglang as sglang
from rlrun.interop.slime_encode import POST_NORM_FLAGS
from rlrun.interop.slime_table import (
    ALIASES, ATTENTION_BACKEND, CONSTANT_FLAGS, ENTRY_ASYNC, FAMILY_FLAGS, FEATURE_OF, ICEPOP_FUNCTION, IGNORED_WITH,
    KEEP, MOE_FLAGS, NO_OP_FLAGS, OVERRIDES, ROWS, SECRET_FLAGS, Row, rows_by_flag,
)
from rlrun.interop.slime_values import same, slime_default
from rlrun.train.megatron import passthrough

# slime's W&B flags with a value -> logging.wandb.KEY (slime/utils/wandb_utils.py: project, team as entity, group,
# host for wandb.login)
WANDB_FLAGS = {"--wandb-project": "project", "--wandb-team": "entity", "--wandb-group": "group",
               "--wandb-host": "host"}

_ROPE_FLAGS = ("--use-rope-scaling", "--rotary-scaling-factor")
# Flags with a codec of their own whose absence means a fixed value: (rlrun path, that value).
_SPECIAL_DEFAULTS = {"--moe-layer-freq": ("model.moe.first_k_dense", 0),
                     "--rotary-scaling-factor": ("model.rope_scaling_factor", 1.0)}
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



# ----------------------------------------------------------------------------------------------------
# import: flags -> rlrun values
# ----------------------------------------------------------------------------------------------------
@dataclass
class Decoded:
    values: dict[str, Any]  # rlrun dotted path -> value slime would use (explicit or slime's default)
    explicit: set[str]  # paths set by a flag in the script
    unknown: list[tuple[Occ, str]]  # (flag, why) to report: unknown, unsupported or secret
    notes: list[str]
    seen: dict[str, Occ] = field(default_factory=dict)  # the flags the script gives (the last of each)


def blocking(unknown: list[tuple[Occ, str]]) -> list[tuple[Occ, str]]:
    """The reported flags that change the job when left out (all but credentials, which are dropped on
    purpose): `rlrun import slime` refuses them unless --allow-unknown."""
    return [(o, why) for o, why in unknown if o.flag not in SECRET_FLAGS]


def known_flags() -> list[str]:
    flags = {r.flag for r in ROWS} | {"--no-" + r.flag[2:] for r in ROWS if r.kind == "bool"}
    flags |= {f for _, f, _ in CONSTANT_FLAGS} | {f for f, _ in MOE_FLAGS} | {ATTENTION_BACKEND[1]}
    flags |= {f for fl in FAMILY_FLAGS.values() for f, _ in fl}
    flags |= {"--group-query-attention", "--num-query-groups", "--multi-latent-attention", "--moe-layer-freq",
              *slime_agent.FLAGS, *slime_weight_sync.FLAGS, "--eval-prompt-data", "--use-wandb", "--wandb-mode", *WANDB_FLAGS, "--offload",
              "--exp-avg-sq-dtype", "--use-precision-aware-optimizer", "--make-vocab-size-divisible-by",
              "--save-debug-rollout-data", "--eval-config",
              *_ROPE_FLAGS, *POST_NORM_FLAGS}
    return sorted(flags)


def _typed(text: str, typ: type) -> Any:
    if typ is int:
        return int(float(text)) if re.fullmatch(r"-?\d+(\.0*)?", text) else int(text)
    if typ is float:
        return float(text)
    return text


def _guess(text: str) -> Any:
    """A flag value with its natural type, for comparing values of flags rlrun does not type itself."""
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
        self.megatron: dict[str, Any] = {}  # train.megatron: megatron-core fields from Megatron's flags
        self.custom_rm: tuple[str, Occ] | None = None  # --custom-rm-path (slime_agent.decode)
        self.datasets: list[dict] = []
        self.mis: Occ | None = None  # --custom-tis-function-path of slime's MIS example
        self.custom_config: Occ | None = None
        self.opd: list[Occ] = []  # --use-opd, --opd-type (slime_modes)
        self.modes: list[Occ] = []  # SFT's implied flags (slime_modes), checked against --loss-type at the end
        self.vocab_pad: Occ | None = None  # --make-vocab-size-divisible-by (_vocab_padding)
        self.eval_config: Occ | None = None  # --eval-config (slime_eval)
        self.weight_sync: dict[str, Occ] = {}  # --update-weight-mode / -transport (slime_weight_sync)

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
                row = self.by_flag.get(occ.flag)
                if row is not None:  # never filled in with the default as if it were absent
                    self.explicit.add(row.path)
                    self.values.setdefault(row.path, None)
        if self.custom_rm is not None:  # slime's rm_hub.async_rm: custom_rm_path first, --rm-type otherwise
            self.set("data.rm_type", *self.custom_rm)
        self.fill_defaults()
        self.vocab_padding()
        slime_modes.finish(self)
        slime_weight_sync.finish(self)
        if self.sglang:
            self.values["rollout.sglang"] = self.sglang
            self.explicit.add("rollout.sglang")
        if self.megatron.get("optimizer_cpu_offload") and "--use-precision-aware-optimizer" in self.seen:
            # the hybrid device optimizer runs on the precision-aware optimizer's code path (Megatron-LM asserts
            # both); without the CPU offload the flag is the no-op noted in special()
            self.megatron["use_precision_aware_optimizer"] = True
        if self.megatron:
            self.values["train.megatron"] = self.megatron
            self.explicit.add("train.megatron")
        return Decoded(self.values, self.explicit, self.unknown, self.notes, dict(self.seen))

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
        elif flag in NO_OP_FLAGS and self.special(occ):
            pass
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
            self.set(row.path, from_slime.get(text) if row.values else _unscaled(row, _typed(text, row.type)), occ)
        elif row.kind in ("true", "false", "bool"):
            self.expect(occ, 0)
            self.set(row.path, row.kind != "false", occ)
        elif row.kind == "list":
            self.set(row.path, [_typed(v, row.type) for v in occ.values] if row.type is not str else list(occ.values),
                     occ)

    def special(self, occ: Occ) -> bool:
        """Flags whose meaning spans settings (see slime_table.SPECIAL) or that rlrun fixes; True if known."""
        flag, vals = occ.flag, occ.values
        if flag == "--num-query-groups":
            self.expect(occ, 1)
            self.set("model.num_query_groups", int(vals[0]), occ)
        elif flag == "--rotary-scaling-factor":
            self.expect(occ, 1)
            self.set("model.rope_scaling_factor", float(vals[0]), occ)
        elif flag in POST_NORM_FLAGS:
            self.set("model.post_norms", True, occ)
        elif flag == "--exp-avg-sq-dtype":  # rlrun keeps both moments in one dtype (--exp-avg-dtype's row)
            self.expect(occ, 1)
            if vals[0] not in ("fp32", "bf16"):
                raise ValueError(f"{vals[0]!r}: rlrun's Adam moments are fp32 or bf16")
            self.set("optim.state_dtype", vals[0], occ)
        elif flag == "--use-precision-aware-optimizer":
            self.expect(occ, 0)  # implied by optim.state_dtype=bf16 (the only precision setting rlrun has)
        elif flag == "--moe-layer-freq":
            self.moe_layer_freq(occ)
        elif flag == "--eval-prompt-data":
            if len(vals) == 1:  # slime: "[legacy] only one eval_prompt_data detected, will assume it is data for
                # aime" (slime/utils/arguments.py, building the eval datasets from --eval-prompt-data)
                vals = ("aime", vals[0])
                self.notes.append(_at(occ, "--eval-prompt-data with one path: slime names the set `aime`"))
            if len(vals) % 2:
                raise ValueError("--eval-prompt-data takes NAME PATH pairs (or one PATH, which slime names aime)")
            self.datasets = [{"name": vals[i], "path": vals[i + 1]} for i in range(0, len(vals), 2)]
            self.explicit.add("eval.datasets")
        elif flag in NO_OP_FLAGS:
            allowed, why = NO_OP_FLAGS[flag]
            if allowed is not None and tuple(vals) != allowed:
                return False
            self.notes.append(_at(occ, f"{' '.join((flag, *vals))}: no change: {why}"))
        elif flag == "--eval-config":
            self.expect(occ, 1)
            self.eval_config = occ  # read in fill_defaults: it wins over --eval-prompt-data wherever it stands
        elif flag == "--make-vocab-size-divisible-by":
            self.expect(occ, 1)
            int(occ.values[0])
            self.vocab_pad = occ  # settled once the vocabulary and TP are known: vocab_padding
        elif flag == "--save-debug-rollout-data":
            self.expect(occ, 1)
            self.set("logging.rollout_records", "all", occ)
            self.notes.append(_at(occ, f"{flag} {vals[0]}: imported as logging.rollout_records=all (every sample of "
                                       "every rollout, written to the run folder's rollout records, not to this "
                                       "path; docs/observability.md)"))
        elif flag == "--use-wandb":
            self.expect(occ, 0)  # the mode is settled in fill_defaults: --wandb-mode may come later
        elif flag == "--wandb-mode":
            self.expect(occ, 1)
            self.set("logging.wandb.mode", vals[0], occ)
        elif flag in WANDB_FLAGS:
            self.expect(occ, 1)
            self.set("logging.wandb." + WANDB_FLAGS[flag], vals[0], occ)
        elif flag == "--custom-tis-function-path":
            self.expect(occ, 1)
            if vals[0] == ICEPOP_FUNCTION:
                self.set("algo.tis_mode", "mask", occ)
            elif vals[0] in slime_mis.FUNCTIONS:
                self.mis = occ  # its settings are in --custom-config-path's YAML: fill_defaults
            else:
                self.unknown.append((occ, "a custom TIS function; rlrun's corrections are algo.tis_level x "
                                          "algo.tis_mode (docs/algorithms.md): not carried over"))
        elif flag == "--custom-config-path":
            self.expect(occ, 1)
            self.custom_config = occ
        elif flag in slime_agent.FLAGS:
            slime_agent.decode(self, occ)
        elif flag in slime_modes.FLAGS:
            slime_modes.decode(self, occ)
        elif flag in slime_weight_sync.FLAGS:
            slime_weight_sync.decode(self, occ)
        elif flag.startswith(sglang.PREFIX) and flag not in sglang.SLIME_OWN:
            self.sglang_flag(occ)
        else:
            return self.constant(occ) or self.megatron_flag(occ)
        return True

    def megatron_flag(self, occ: Occ) -> bool:
        """A Megatron flag of a megatron-core config field (rlrun.train.megatron.passthrough) -> train.megatron,
        unless the feature behind it is one rlrun lacks (FEATURE_OF: refused naming it)."""
        if occ.flag in FEATURE_OF:
            return False
        got = passthrough.resolve_flag(occ.flag, occ.values)
        if got is None:
            return False
        field, value = got
        if field in passthrough.TYPED_FIELDS:
            return False  # a typed rlrun setting whose row did not take this spelling: reported as unknown
        self.megatron[field] = value
        for k, v in passthrough.cli_companions(field, value).items():
            if k not in self.megatron:
                self.megatron[k] = v
                self.notes.append(_at(occ, f"{occ.flag}: train.megatron.{k}={v!r} as Megatron-LM's command line "
                                           f"has it (megatron-core's own default differs)"))
        return True

    def sglang_flag(self, occ: Occ) -> None:
        got = sglang.resolve(occ.flag, occ.values)
        if got.field is None:
            self.unknown.append((occ, got.note))
            return
        if got.note:
            self.notes.append(f"{occ.where}: {occ.flag}: {got.note}")
        if got.field in sglang.TYPED:
            self.set(sglang.TYPED[got.field], got.value, occ)
        else:
            self.sglang[got.field] = got.value

    def constant(self, occ: Occ) -> bool:
        fixed = {f: v for _, f, v in CONSTANT_FLAGS} | {f: v for f, v in MOE_FLAGS}
        fixed |= {f: v for fl in FAMILY_FLAGS.values() for f, v in fl}
        fixed |= {ATTENTION_BACKEND[1]: ATTENTION_BACKEND[2], "--group-query-attention": (),
                  "--multi-latent-attention": (), "--use-rope-scaling": ()}
        if occ.flag not in fixed:
            return False
        moe_runtime = {f for f, _ in MOE_FLAGS}
        if (not _same_values(occ.values, fixed[occ.flag]) and occ.flag in moe_runtime and occ.flag not in FEATURE_OF
                and self.megatron_flag(occ)):
            pass  # another MoE runtime setting (dispatcher, router dtype, aux loss): passed through (train.megatron)
        elif not _same_values(occ.values, fixed[occ.flag]) and occ.flag in FEATURE_OF:
            self.unknown.append((occ, f"slime feature rlrun lacks: {FEATURE_OF[occ.flag]}"))
        elif not _same_values(occ.values, fixed[occ.flag]):
            want = " ".join((occ.flag, *fixed[occ.flag]))
            self.unknown.append((occ, f"rlrun always uses `{want}`; this value is not carried over"))
        return True

    def moe_layer_freq(self, occ: Occ) -> None:
        self.expect(occ, 1)
        text = occ.values[0].replace(" ", "")
        bits = _layer_pattern(text)
        if m := _MOE_FREQ.match(text):
            self.set("model.moe.first_k_dense", int(m.group(1)), occ)
        elif bits is not None:
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
        if flag in FEATURE_OF:
            return f"slime feature rlrun lacks: {FEATURE_OF[flag]}"
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
            if "--num-experts" not in self.seen:  # Megatron reads the MoE flags only with --num-experts
                for k in [k for k in v if k.startswith("model.moe.")]:
                    del v[k]
                    self.explicit.discard(k)
                v["model.moe"] = None
            elif "--moe-layer-freq" not in self.seen:  # absent: every layer is MoE (Megatron's default 1)
                v.setdefault("model.moe.first_k_dense", 0)
            if "--multi-latent-attention" not in self.seen:
                v["model.mla"] = None
            v["model.family"] = family_of(v)
        self.read_eval_config()
        if self.datasets:
            v["eval.datasets"] = self.datasets  # a missing rm_type is filled by the importer (data.rm_type)
        elif "eval.datasets" not in self.explicit:
            v["eval.datasets"] = []
        v.setdefault("logging.wandb.mode", "online" if "--use-wandb" in self.seen else "disabled")
        v.setdefault("algo.tis_mode", "truncate")  # slime's built-in TIS
        self.custom_tis_config()
        if v.get("algo.use_opsm"):
            v.setdefault("algo.opsm_reference", "old")  # slime's compute_opsm_mask compares with old_log_probs
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
        self.apply_overrides()

    def read_eval_config(self) -> None:
        """--eval-config: slime builds its eval datasets from the file, ignoring --eval-prompt-data
        (slime/utils/arguments.py _resolve_eval_datasets)."""
        occ = self.eval_config
        if occ is None:
            return
        try:
            datasets, lost = slime_eval.read(occ.values[0])
        except ValueError as exc:
            self.unknown.append((occ, str(exc)))
            return
        if "--eval-prompt-data" in self.seen:
            self.notes.append(_at(occ, "--eval-config wins over --eval-prompt-data (slime reads only the file)"))
        self.unknown += [(occ, why) for why in lost]
        self.datasets = datasets
        self.explicit.add("eval.datasets")

    def vocab_padding(self) -> None:
        """Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by x TP (slime: padded_vocab_size
        = _vocab_size_with_padding(--vocab-size), slime/backends/megatron_utils/arguments.py); rlrun trains the
        model's vocabulary unpadded, so the flag is a no-op exactly where that multiple divides it."""
        occ = self.vocab_pad
        if occ is None:
            return
        vocab, tp = self.values.get("model.vocab_size"), self.values.get("parallelism.tp") or 1
        multiple = int(occ.values[0]) * tp
        if isinstance(vocab, int) and vocab % multiple == 0:
            self.notes.append(_at(occ, f"{occ.flag} {occ.values[0]}: no change: model.vocab_size={vocab} is a "
                                       f"multiple of {occ.values[0]} x TP {tp}, so Megatron's padded vocabulary is "
                                       "the model's own"))
        else:
            self.notes.append(_at(occ, f"{occ.flag}: Megatron would pad model.vocab_size={vocab} to a multiple of "
                                       f"{multiple}; rlrun trains the model's vocabulary unpadded"))
            self.unknown.append((occ, f"slime feature rlrun lacks: {FEATURE_OF[occ.flag]}"))

    def custom_tis_config(self) -> None:
        """slime's MIS example reads its settings from --custom-config-path (slime_mis.py); without it that
        YAML configures something rlrun does not read."""
        occ = self.custom_config
        if self.mis is None:
            if occ is not None:
                self.unknown.append((occ, "a YAML of custom-function settings; rlrun reads it only for slime's MIS "
                                          "example (--custom-tis-function-path ...mis.compute_mis_weights_with_cp)"))
            return
        if occ is None:
            self.unknown.append((self.mis, "slime's MIS function without --custom-config-path: mis.py's settings "
                                           "are missing (slime stops with an AttributeError)"))
            return
        try:
            values, lost = slime_mis.mis_values(slime_mis.read_config(occ.values[0]),
                                                bool(self.values.get("algo.use_tis")))
        except ValueError as exc:
            self.unknown.append((occ, str(exc)))
            return
        self.unknown += [(occ, f"MIS config: {why}") for why in lost]
        for path, value in values.items():
            self.set(path, value, occ)

    def apply_overrides(self) -> None:
        """What slime/Megatron do instead of what the flags say (slime_table.OVERRIDES), and flags they
        ignore (IGNORED_WITH): the value they use, and a note saying so."""
        seen, v = set(self.seen), self.values
        for o in OVERRIDES:
            try:
                applies = o.applies(v, seen)
            except KeyError:
                continue
            if applies:
                if o.why:
                    self.notes.append(_at(self.seen[o.flag], o.why.format(**{k.replace(".", "_"): x
                                                                               for k, x in v.items()})))
                v[o.path] = o.value(v)
        self.notes += [_at(self.seen[flag], "warning: " + why) for flag, other, why in IGNORED_WITH
                       if flag in seen and other in seen]


NO_MODEL = ("the script gives no model flags (--num-layers, --hidden-size, --num-attention-heads, ... usually from "
            "scripts/models/*.sh): Megatron refuses to start without them (Megatron-LM megatron/training/arguments.py "
            "validate_args), so rlrun imports no model for it")


def family_of(v: dict[str, Any]) -> str:
    """The model family the flags define (rlrun.config.families.FAMILIES): the families whose hard-wired fields
    (`fixed`) and MoE/MLA layout all match, the one with the most defining features present winning
    (--qk-layernorm: qwen3 / qwen3_moe; --add-qkv-bias without it: qwen2 (Qwen2/2.5, MiMo); the post-norms of
    GLM-4: glm4; none of them: llama, the plain layout)."""
    from rlrun.config.families import FAMILIES

    moe, mla = (v.get(f"model.{s}") is not None or any(k.startswith(f"model.{s}.") for k in v) for s in ("moe", "mla"))
    fields = {"qk_layernorm": False, "add_qkv_bias": False, "post_norms": False}
    fields |= {k[len("model."):]: x for k, x in v.items() if k.startswith("model.") and k.count(".") == 1}
    fits = [(sum(val is True for val in f.fixed.values()), -i, name) for i, (name, f) in enumerate(FAMILIES.items())
            if f.moe == moe and f.mla == mla and all(fields.get(k) == val for k, val in f.fixed.items())]
    return max(fits)[2] if fits else "llama"


def _layer_pattern(text: str) -> list[int] | None:
    """Megatron's --moe-layer-freq as a list of 0/1 per layer: a Python list expression such as `[1]*62` or
    `([0]*3+[1]*58)` (Megatron-LM megatron/training/arguments.py moe_freq_type evaluates it), read here with
    ast instead of eval: only list literals of 0/1, `*` by an int and `+`."""
    import ast

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and e.value in (0, 1) for e in node.elts):
            return [e.value for e in node.elts]  # type: ignore[attr-defined]
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(node.op, ast.Mult) and {type(a), type(b)} == {list, int}:
                return a * b if isinstance(a, list) else b * a
        raise ValueError(text)

    try:
        got = ev(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return got if isinstance(got, list) else None


def _at(occ: Occ, text: str) -> str:
    return f"{occ.where}: {text}" if occ.where else text


def _unscaled(row: Row, value: Any) -> Any:
    """A slime value in rlrun's unit (Row.scale); it must be a whole number of them."""
    if row.scale == 1:
        return value
    if value % row.scale:
        raise ValueError(f"{value} is not a whole multiple of {row.scale} (rlrun's {row.path} counts units of "
                         f"{row.scale} bytes); round it to a multiple")
    return value // row.scale


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
        if row is None and flag.startswith(sglang.PREFIX) and flag not in sglang.SLIME_OWN:
            got = sglang.resolve(flag, occ.values)  # an abbreviation compares as the flag it expands to
            flag = sglang.PREFIX + got.field.replace("_", "-") if got.field else flag
            row = by_flag.get(flag)
        if flag in _SPECIAL_DEFAULTS:  # spelled many ways ([0]*3+[1]*58 or [0, 0, 0, 1, ...]): compare values
            path, default = _SPECIAL_DEFAULTS[flag]
            if path in decoded.values and not same(decoded.values[path], default):
                out.add((flag, (decoded.values[path],)))
            continue
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
