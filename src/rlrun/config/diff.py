"""`rlrun diff A B`: what differs between two experiments. A and B may be run dirs (config.yaml inside),
resolved YAML files, YAML lists of overrides, or override lists ("model=qwen3-4b,optim.lr=1e-6" or a
quoted, space-separated list; "" or "default" is the default config). Resolved values are compared by
dotted path (changed / added / removed), then the plans (GPUs, layout, batch, steps, memory). Exit 0 when
identical, 1 when they differ (like diff(1)), 2 when an input is invalid."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlrun.config.compose import Composer
from rlrun.config.errors import ConfigError, Problem
from rlrun.config.plan import make_plan
from rlrun.config.rundir import read_run_dir, run_dirs_in
from rlrun.config.schema import RunConfig
from rlrun.config.validate import validate

PLAN_KEYS = ("world_size", "tp", "pp", "cp", "dp", "ep", "colocate", "num_nodes", "trainer_gpus", "rollout_gpus",
             "num_engines", "gpus_per_engine", "samples_per_rollout", "global_batch_size", "steps_per_rollout",
             "micro_batches_per_step", "total_steps", "params_total", "params_active", "fits", "weight_sync")
_OVERRIDE_START = re.compile(r"^[+~]{0,2}[\w.@/\-]+(=|$)")


@dataclass
class Side:
    label: str
    resolved: dict
    plan: dict
    choices: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. fields an older rlrun did not write


@dataclass
class Diff:
    a: str
    b: str
    changed: dict[str, tuple[Any, Any]]
    added: dict[str, Any]
    removed: dict[str, Any]
    plan: dict[str, tuple[Any, Any]]
    choices: dict[str, tuple[Any, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.changed or self.added or self.removed or self.plan or self.choices)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "identical": self.identical, "choices": _pairs(self.choices),
                "changed": _pairs(self.changed), "added": self.added, "removed": self.removed,
                "plan": _pairs(self.plan), "notes": self.notes}


def _pairs(d: dict) -> dict:
    return {k: {"a": a, "b": b} for k, (a, b) in d.items()}


def split_overrides(arg: str) -> list[str]:
    """'model=qwen3-4b,optim.lr=1e-6' or 'model=qwen3-4b optim.lr=1e-6' -> overrides. A comma starts a new
    override only outside brackets/quotes and when what follows looks like key=..., so sweep-free values
    such as rollout.stop=[a,b] stay whole."""
    parts, buf, depth, quote = [], "", 0, ""
    for i, ch in enumerate(arg):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif depth == 0 and (ch.isspace() or (ch == "," and _OVERRIDE_START.match(arg[i + 1:].lstrip()))):
            if buf.strip():
                parts.append(buf.strip())
            buf = ""
            continue
        buf += ch
    if buf.strip():
        parts.append(buf.strip())
    return parts


def _plan_dict(cfg, choices: dict) -> dict:
    return make_plan(cfg, choices).to_dict()


def load_side(arg: str, config_dir=None, composer=None) -> Side:
    import yaml


    path = Path(arg)
    picked: list[str] = []
    if path.is_dir() and not (path / "config.yaml").is_file() and run_dirs_in(path):  # a run name's folder
        runs = run_dirs_in(path)
        path = runs[-1]
        picked = [f"{arg} holds {len(runs)} run(s) of one run name: compared its newest, {path} (pass a run dir "
                  f"to pick another)"]
    if path.is_dir() and (path / "config.yaml").is_file():  # a run dir
        raw, _ = read_run_dir(path)
        plan_file = path / "plan.json"
        choices = json.loads(plan_file.read_text()).get("choices", {}) if plan_file.is_file() else {}
        notes = picked + _fill_missing(raw, _defaults_for(choices, composer), str(path), _written_by(path))
        cfg = _validate_saved(raw, f"{path}/config.yaml")
        return Side(str(path), cfg.to_dict(), _plan_dict(cfg, choices), choices, notes)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, list):
            return _from_overrides([str(x) for x in doc], str(path), config_dir, composer)
        if isinstance(doc, dict) and set(doc) >= set(RunConfig.model_fields):
            cfg = _validate_saved(doc, str(path))
            return Side(str(path), cfg.to_dict(), _plan_dict(cfg, {}))
        raise ConfigError([Problem(str(path), "is neither a resolved config (all of run, model, train, ...) nor a "
                                   "YAML list of overrides", "pass a run dir, its config.yaml, or an override list")])
    if arg in ("", "default", "-"):
        return _from_overrides([], "default", config_dir, composer)
    if "=" in arg or arg.startswith("~"):
        return _from_overrides(split_overrides(arg), arg, config_dir, composer)
    if path.is_dir():  # a folder, but no run dir in it (nor one itself)
        raise ConfigError([Problem(arg, "is a folder with no run dir in it (a run dir holds config.yaml: "
                                   "{run.output_dir}/{run.name}/{timestamp})",
                                   "pass a run dir, e.g. one of its subfolders holding config.yaml, a YAML file, "
                                   "or overrides such as 'model=qwen3-4b,optim.lr=1e-6'")])
    raise ConfigError([Problem(arg, "not found: no such run dir or YAML file, and not an override list",
                               "pass a run dir, a YAML file, or overrides such as 'model=qwen3-4b,optim.lr=1e-6'")])


def _defaults_for(choices: dict, composer) -> dict:
    """Today's composed config for the run's own group choices (model, algo, hardware, ...), or the
    plain default when those options no longer exist; None without a composer."""
    if composer is None:
        return {}
    try:
        return composer.compose([f"{g}={o}" for g, o in choices.items() if isinstance(o, str)]).raw
    except Exception:  # noqa: BLE001 - a renamed group option: today's plain default is the best guess
        return composer.compose([]).raw


def _written_by(run_dir: Path) -> str:
    try:
        return "rlrun " + str(json.loads((run_dir / "versions.json").read_text()).get("rlrun", "?"))
    except (OSError, ValueError):
        return "an older rlrun"


def _fill_missing(saved: dict, defaults: dict, where: str, written_by: str, prefix: str = "") -> list[str]:
    """Fields that a run dir's config.yaml lacks because an older rlrun wrote it (the schema has
    grown since) get today's default for the run's groups, in place; returns one note per field,
    so the diff says what was assumed rather than refusing to compare."""
    notes = []
    for key, value in defaults.items():
        if key not in saved:
            saved[key] = value
            notes.append(f"{where}: {prefix}{key} is not in its config.yaml (written by {written_by}); "
                         f"compared at today's default {json.dumps(value, default=str)}")
        elif isinstance(value, dict) and value and isinstance(saved[key], dict) and saved[key]:
            notes += _fill_missing(saved[key], value, where, written_by, f"{prefix}{key}.")
    return notes


def _validate_saved(raw: dict, where: str):
    """A saved config holds concrete values: validate it as it is (no derivation), rules included."""

    try:
        return validate(raw)
    except ConfigError as e:
        raise ConfigError([Problem(p.path, f"{where}: {p.message}", p.fix, p.value) for p in e.problems]) from None


def _from_overrides(overrides: list[str], label: str, config_dir, composer) -> Side:
    composed = composer.compose(overrides)
    cfg = validate(composed.raw)
    return Side(label, cfg.to_dict(), _plan_dict(cfg, composed.choices), composed.choices)


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(d, list) and d and any(isinstance(x, dict) for x in d):
        out = {}
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: d}


def compare(a: Side, b: Side) -> Diff:
    fa, fb = flatten(a.resolved), flatten(b.resolved)
    changed = {k: (fa[k], fb[k]) for k in fa if k in fb and fa[k] != fb[k]}
    added = {k: fb[k] for k in fb if k not in fa}
    removed = {k: fa[k] for k in fa if k not in fb}
    pa, pb = _plan_items(a.plan), _plan_items(b.plan)
    plan = {k: (pa.get(k), pb.get(k)) for k in pa.keys() | pb.keys() if pa.get(k) != pb.get(k)}
    choices = {k: (a.choices.get(k), b.choices.get(k)) for k in a.choices.keys() | b.choices.keys()
               if a.choices and b.choices and a.choices.get(k) != b.choices.get(k)}
    return Diff(a.label, b.label, changed, added, removed, dict(sorted(plan.items())), dict(sorted(choices.items())),
                a.notes + b.notes)


def _plan_items(plan: dict) -> dict[str, Any]:
    return {**{k: plan.get(k) for k in PLAN_KEYS}, **{f"memory_gib.{k}": v for k, v in plan["memory_gib"].items()}}


def _v(x: Any) -> str:
    return json.dumps(x) if not isinstance(x, str) else x


def render_text(d: Diff) -> str:
    notes = [f"note: {n}" for n in d.notes]
    if d.identical:
        return "\n".join(notes + [f"identical: {d.a} and {d.b} resolve to the same config and plan"])
    out = notes + [f"--- {d.a}", f"+++ {d.b}"]
    for title, items in (("groups", {k: f"{_v(a)} -> {_v(b)}" for k, (a, b) in d.choices.items()}),
                         ("changed", {k: f"{_v(a)} -> {_v(b)}" for k, (a, b) in d.changed.items()}),
                         ("added", {k: _v(v) for k, v in d.added.items()}),
                         ("removed", {k: _v(v) for k, v in d.removed.items()}),
                         ("plan", {k: f"{_v(a)} -> {_v(b)}" for k, (a, b) in d.plan.items()})):
        if items:
            out.append(f"{title} ({len(items)}):")
            out += [f"  {k}: {v}" for k, v in items.items()]
    return "\n".join(out)


def render_md(d: Diff) -> str:
    notes = [f"> note: {n}" for n in d.notes] + ([""] if d.notes else [])
    if d.identical:
        return "\n".join(notes + [f"**identical**: `{d.a}` and `{d.b}` resolve to the same config and plan."])
    out = notes + [f"Diff of `{d.a}` (A) and `{d.b}` (B)", ""]
    for title, rows in (("groups", [(k, a, b) for k, (a, b) in d.choices.items()]),
                        ("changed", [(k, a, b) for k, (a, b) in d.changed.items()]),
                        ("added", [(k, "", v) for k, v in d.added.items()]),
                        ("removed", [(k, v, "") for k, v in d.removed.items()]),
                        ("plan", [(k, a, b) for k, (a, b) in d.plan.items()])):
        if rows:
            out += [f"### {title}", "", "| path | A | B |", "|---|---|---|"]
            out += [f"| `{k}` | {_md(a)} | {_md(b)} |" for k, a, b in rows] + [""]
    return "\n".join(out)


def _md(x: Any) -> str:
    return "" if x == "" else f"`{_v(x)}`".replace("|", "\\|")


def diff_main(a) -> int:
    args = a.args
    if len(args) != 2:
        raise ConfigError([Problem("", f"rlrun diff takes two things to compare, got {len(args)}: {args}",
                                   "rlrun diff A B, where A/B are run dirs, YAML files or quoted override lists "
                                   "(\"\" or default for the default config)")])
    if a.format not in ("text", "json", "md"):
        raise ConfigError([Problem("--format", f"unknown format {a.format!r}", "use --format text, json or md")])
    with Composer(a.config_dir) as composer:
        problems, sides = [], []
        for arg in args:
            try:
                sides.append(load_side(arg, a.config_dir, composer))
            except ConfigError as e:
                problems += [Problem(p.path, f"[{arg}] {p.message}", p.fix, p.value) for p in e.problems]
    if problems:
        raise ConfigError(problems)
    d = compare(*sides)
    fmt = "json" if a.json else a.format
    print(json.dumps(d.to_dict(), indent=2, default=str) if fmt == "json" else render_md(d) if fmt == "md"
          else render_text(d))
    return 0 if d.identical else 1
