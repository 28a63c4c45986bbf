"""Turn a slime run script into an rlrun experiment (`conf/experiment/NAME.yaml`): the matching groups
in a defaults list, then only the settings where the script differs from them.

The script is run by bash in a sandbox where every command that acts on the machine or the network is a
recording no-op (bash_run.py), so the importer gets the argv slime would; where that sandbox cannot be built,
the static reader (bash_script.py) reads it instead and the report says so. Values mean what slime would do (slime_decode.decode
fills slime's defaults for absent flags), so the experiment reproduces the script's run rather than
rlrun's defaults. Flags rlrun has no setting for are reported and listed at the end of the YAML.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from rlrun.interop import slime_checks
from rlrun.interop.bash_script import ScriptError, read_script
from rlrun.interop.slime_decode import NO_MODEL, Occ, decode, parse_args
from rlrun.interop.slime_sglang import PREFIX as SGLANG_PREFIX
from rlrun.interop.slime_values import get_path, same
from rlrun.interop.slime_groups import SCORED_GROUPS, Choice, choose_groups, vendor_of
from rlrun.interop.slime_table import DERIVED_FROM, PLUMBING_ENV, RLRUN_DERIVED, ROWS, SECRET_FLAGS

# What a slime script implies without a flag: slime trains with Megatron and generates with SGLang.
IMPLIED = {"train.backend": "megatron", "rollout.engine": "sglang"}
FLAG_OF = {r.path: r.flag for r in ROWS}  # rlrun path -> its slime flag, for reports
# Flags an export may add to what a script gives, and why (docs/slime.md "Round trip"): not reported.
EXPORT_EXTRAS = {"--max-position-embeddings": "rlrun knows the model's position limit (config.json's); slime's "
                                              "scripts leave it to Megatron"}
ROUND_TRIP_WORDS = {"lost": "loses", "changed": "writes another value for", "added": "adds"}


@dataclass
class ImportResult:
    name: str
    yaml_text: str
    choices: dict[str, Choice]
    overrides: dict[str, Any]  # dotted path -> value written to the YAML
    unknown: list[tuple[Occ, str]]
    notes: list[str]
    problems: list[str] = field(default_factory=list)  # rlrun validation problems of the result
    filled: dict[str, str] = field(default_factory=dict)  # written path -> the absent flag whose default it is
    # what `rlrun export slime` of the experiment gives back differently (flag names): lost, changed value, added
    round_trip: dict[str, list[str]] = field(default_factory=dict)
    # what slime/Megatron refuse at start-up and rlrun's config cannot say (slime_checks): the import refuses
    fails: list[Any] = field(default_factory=list)

    def report(self, written: bool = True) -> str:
        lines = [f"experiment {self.name}:"]
        for c in self.choices.values():
            detail = c.basis or f"all {c.group}.* settings match" if not c.differing else \
                f"{len(c.differing)} {c.group}.* setting(s) overridden: {', '.join(c.differing[:6])}" + \
                (" ..." if len(c.differing) > 6 else "")
            lines.append(f"  {c.group}={c.option} ({detail})")
        where = "written" if written else "(not written)"
        lines.append(f"  {len(self.overrides)} override(s) {where}")
        if self.unknown:
            lines.append(f"  {len(self.unknown)} slime flag(s) with no rlrun setting"
                         + (" (listed at the end of the YAML):" if written else ":"))
            lines.extend(f"    {_occ_text(o)}  [{o.where}] {why}" for o, why in self.unknown)
        if self.filled:
            lines.append(f"  {len(self.filled)} setting(s) filled in with slime's/Megatron's value for an absent flag "
                         "(listed in the YAML):")
            lines.extend(f"    {p} = {self.overrides[p]!r}  ({flag} absent)" for p, flag in self.filled.items())
        lines.extend(f"  note: {n}" for n in self.notes)
        for kind, flags in self.round_trip.items():
            if flags:
                lines.append(f"  `rlrun export slime` of it {ROUND_TRIP_WORDS[kind]}: {', '.join(flags)}")
        if self.problems:
            lines.append("  the imported config does not validate:")
            lines.extend(f"    {p}" for p in self.problems)
        if self.fails:
            lines.append("  slime would not run this script (rlrun would run something else in its place):")
            lines.extend(f"    {_named(p)}" for p in self.fails)
        return "\n".join(lines)


def _named(p: Any, sources: dict[str, str] | None = None) -> str:
    """A problem with the slime flag (or script line) behind its key: `train.x (--flag): ...`."""
    source = (sources or {}).get(p.path) or FLAG_OF.get(p.path)
    if source is None and p.path.startswith("rollout.sglang."):  # a ServerArgs field: slime's --sglang-FIELD
        source = SGLANG_PREFIX + p.path.split(".")[2].replace("_", "-")
    return str(p).replace(f"{p.path}:", f"{p.path} ({source}):", 1) if source else str(p)


def _occ_text(o: Occ) -> str:
    values = ("<redacted>",) if o.flag in SECRET_FLAGS and o.values else o.values
    return " ".join((o.flag, *values)).strip()


def experiment_name(path: str | Path) -> str:
    """`run-qwen3-4B-amd.sh` -> `run-qwen3-4b-amd`: a valid Hydra option name."""
    stem = Path(path).stem.lower()
    return re.sub(r"[^a-z0-9_.-]+", "-", stem).strip("-") or "imported"


def read_launch(script_path: str | Path, environ: dict[str, str] | None = None, static: bool = False,
                binds: dict[str, str] | None = None):
    """The script as bash runs it (bash_run.run_script), or read statically (bash_script.read_script) when
    `static` or when the sandbox cannot be built here; then the first note says why."""
    from rlrun.interop.bash_run import run_script, sandbox_problem

    why = "--static was given" if static else sandbox_problem()
    if why is None:
        return run_script(script_path, environ, binds=binds)
    script = read_script(script_path, environ)
    script.notes.insert(0, f"read without bash ({why}): loops, if blocks, functions and command substitutions "
                           "were not run; values they set are reported as unknown")
    return script


def import_script(script_path: str | Path, name: str | None = None, config_dir: Any = None,
                  forced: dict[str, str] | None = None, environ: dict[str, str] | None = None,
                  static: bool = False, binds: dict[str, str] | None = None) -> ImportResult:
    """Read a slime script and build the experiment YAML; validate it with rlrun.config.load.
    `environ` plays the variables the script expects from its caller (e.g. {"BASE_DIR": "/data"}).
    Raises ScriptError when the script has no train.py launch to read."""
    from rlrun.config.compose import Composer, conf_dir

    script = read_launch(script_path, environ, static, binds)
    if script.launch is None:
        raise ScriptError(f"{script_path}: no `ray job submit ... -- python3 train.py ...` line found; "
                          "rlrun reads the arguments of that line")
    occs = parse_args(script.launch.args)
    decoded = decode(occs, script.launch.entry)
    fails = slime_checks.run(decoded)
    if "model.num_layers" not in decoded.explicit:  # a launch without model flags: Megatron would not start
        decoded.unknown.append((Occ("(model flags)", (), ""), NO_MODEL))
    values = {**decoded.values, **IMPLIED}
    _leave_derived(values, decoded.explicit)
    if "--num-epoch" in decoded.seen and "--num-rollout" not in decoded.seen:
        decoded.notes.append(_epochs_to_rollouts(values))
    sources: dict[str, str] = {"train.async_train": f"`{script.launch.entry}`"}  # the keys no flag sets
    head = ray_head(script)
    if head is not None and values["train.num_nodes"] == 1:  # a trainer on more nodes: others join outside it
        gpus, where = head
        sources["cluster.num_nodes"] = f"`ray start --head --num-gpus {gpus}` at {where}, no worker joins"
        if "hardware.gpus_per_node" not in decoded.explicit:  # --num-gpus-per-node, where given, wins
            values["hardware.gpus_per_node"] = gpus
            sources["hardware.gpus_per_node"] = f"`ray start --head --num-gpus {gpus}` at {where}"
        decoded.notes.append(f"{where}: the script starts one Ray head with {gpus} GPUs and no worker joins it: "
                             f"imported as cluster.num_nodes=1 of {values['hardware.gpus_per_node']} GPUs")
        values["cluster.num_nodes"] = 1
    else:
        values["cluster.num_nodes"] = cluster_nodes(values)
    env = {k: v for k, v in script.env().items() if k not in PLUMBING_ENV and "${" not in v and "$(" not in v}
    dirs = [Path(config_dir)] if config_dir else []
    dirs.append(conf_dir())
    name = name or experiment_name(script_path)
    with Composer(config_dir) as composer:
        choices = choose_groups(composer, values, env, dirs, forced or {})
        if "hardware" not in (forced or {}):
            values["checks.memory_fit"] = "warn"
            decoded.notes.append(f"the script does not name its GPU: hardware={choices['hardware'].option} is the "
                                 f"closest profile for a {vendor_of(env)} machine, so the memory estimate warns instead "
                                 "of refusing (checks.memory_fit=warn); pass --hardware NAME to check it")
        base = composer.compose([f"{g}={c.option}" for g, c in choices.items()]).raw
    _fill_eval_rm_type(values, base)
    flat = {p: v for p, v in values.items() if not same(get_path(base, p), v)}
    flat.update({f"hardware.env.{k}": v for k, v in env.items() if base["hardware"]["env"].get(k) != v})
    flat = _prune_derived(flat, base, choices, name, config_dir)
    flat = _keep_followers(flat, values, base, choices, name, config_dir)
    choices = {g: replace(c, differing=tuple(p for p in flat if p.startswith(g + ".")))
               for g, c in choices.items()}
    filled = {p: FLAG_OF[p] for p in flat
              if p in FLAG_OF and p not in decoded.explicit and p not in sources and flat[p] is not None}
    result = ImportResult(name, "", choices, flat, decoded.unknown, script.notes + decoded.notes, filled=filled,
                          fails=fails)
    result.yaml_text = render_yaml(result, Path(script_path).name, base)
    result.problems = validate_yaml(result.yaml_text, name, config_dir, sources)
    if not result.problems:
        cfg = _load_text(result.yaml_text, name, config_dir).model_dump(mode="python")
        result.round_trip = round_trip(script.launch.args, script.launch.entry, cfg)
    return result


def round_trip(args: list[Any], entry: str, cfg: dict) -> dict[str, list[str]]:
    """Compare a script's flags with the export of `cfg` (its import) as flag sets (slime_decode.flag_set: values
    typed, paths as placeholders, flags at slime's default dropped): the flags the export loses, writes with
    another value, or adds (less EXPORT_EXTRAS), by name."""
    from rlrun.interop.slime_decode import flag_set
    from rlrun.interop.slime_encode import encode
    from rlrun.interop.slime_table import ARRAYS

    enc = encode(cfg)
    exported = [t for tokens in enc.launch for t in tokens]
    exported += [t for a in ARRAYS for tokens in enc.arrays[a] for t in tokens]
    before, after = flag_set(args, entry), flag_set(exported, enc.entry)
    names_before, names_after = {f for f, _ in before}, {f for f, _ in after}
    return {"lost": sorted(names_before - names_after),
            "changed": sorted({f for f, _ in before - after} & names_after),
            "added": sorted(names_after - names_before - set(EXPORT_EXTRAS))}


def _leave_derived(values: dict[str, Any], explicit: set[str]) -> None:
    """null (rlrun derives it) for one side of a pair the script leaves unset (slime_table.DERIVED_FROM)."""
    for path, partner in DERIVED_FROM.items():
        if path not in explicit and values.get(partner) is not None:
            values[path] = None


def cluster_nodes(values: dict[str, Any]) -> int:
    """The Ray cluster slime's launch needs (started outside slime with `ray start`): the trainer's nodes, or,
    with separate rollout GPUs, trainer and rollout GPUs packed on nodes of --num-gpus-per-node."""
    trainer = values["train.num_nodes"] * values["train.gpus_per_node"]
    rollout = values.get("rollout.num_gpus") or 0
    if values.get("train.colocate") or not rollout:
        return values["train.num_nodes"]
    return max(values["train.num_nodes"], -(-(trainer + rollout) // values["hardware.gpus_per_node"]))


def _epochs_to_rollouts(values: dict[str, Any]) -> str:
    """--num-epoch without --num-rollout: slime sets num_rollout = (dataset rows // --rollout-batch-size) x epochs
    at start-up (slime/ray/placement_group.py, RolloutManager.get_num_rollout_per_epoch); rlrun needs the number,
    so the import counts the rows of --prompt-data where the file is here, and says what it did."""
    path, epochs, batch = values.get("data.prompt_data"), values["data.num_epochs"], values["rollout.rollout_batch_size"]
    try:
        with open(path, encoding="utf-8") as f:
            rows = sum(1 for line in f if line.strip())
    except (OSError, TypeError):
        return (f"warning: --num-epoch {epochs} without --num-rollout: slime counts the rollouts from the rows of "
                f"--prompt-data {path}, which is not here to count; rollout.num_rollout keeps rlrun's group value: "
                f"set it to {epochs} x rows // {batch} (or add --num-rollout to the script)")
    values["rollout.num_rollout"] = rows // batch * epochs
    return (f"--num-epoch {epochs} without --num-rollout: rollout.num_rollout = {rows} rows of {path} // "
            f"{batch} x {epochs} = {values['rollout.num_rollout']}, as slime computes it (before its "
            "--rollout-max-prompt-len filter)")


def ray_head(script: Any) -> tuple[int, str] | None:
    """(GPUs, file:line) of the Ray head the script starts (`ray start --head --num-gpus N`) when nothing in it joins a
    worker to that head (a `ray start --address ...` it runs, sends over ssh/pdsh/srun, or spells in its text:
    a loop over a host file the sandbox lacks runs no ssh), else None (the cluster is started outside the
    script: slime's multi-node recipes)."""
    head = None
    for name, args, where in script.commands:
        text = " ".join(args)
        if name == "ray" and args[:1] == ["start"] and "--head" in args:
            head = (_num_gpus(args), where)
        elif "ray start" in text or (name == "ray" and args[:1] == ["start"]):
            return None  # a worker joins (or a remote command starts Ray)
    texts = [p.read_text(errors="replace") for p in [Path(script.path), *script.sourced] if Path(p).is_file()]
    if head is None or head[0] is None or any(re.search(r"ray start\b[^\n]*--address", t) for t in texts):
        return None
    return head  # type: ignore[return-value]


def _num_gpus(args: list[str]) -> int | None:
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--num-gpus=") else \
            args[i + 1] if a == "--num-gpus" and i + 1 < len(args) else None
        if value is not None:  # 0: counted from a machine the sandbox does not have (`nvidia-smi -L | wc -l`)
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def _fill_eval_rm_type(values: dict[str, Any], base: dict) -> None:
    # slime scores eval sets with --rm-type unless an --eval-config dataset names its own rm_type; --custom-rm-path
    # wins over both (slime/rollout/rm_hub/__init__.py async_rm); rlrun names it per dataset
    rm_type = values.get("data.rm_type", base["data"]["rm_type"])
    custom = rm_type.startswith("slime:") if isinstance(rm_type, str) else False
    values["eval.datasets"] = [{**d, "rm_type": d["rm_type"] if d.get("rm_type") and not custom else rm_type}
                               for d in values.get("eval.datasets", [])]


def _nest(flat: dict[str, Any], base: dict) -> dict:
    """Dotted paths to a nested dict in the config tree's own key order (the YAML reads like conf/)."""
    order = {p: i for i, p in enumerate(_paths(base))}
    nested: dict = {}
    for path in sorted(flat, key=lambda p: (order.get(p, order.get(p.rsplit(".", 1)[0], len(order))), p)):
        node = nested
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = flat[path]
    return nested


def _paths(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        p = f"{prefix}{k}"
        out.append(p)
        if isinstance(v, dict):
            out.extend(_paths(v, p + "."))
    return out


def _collapse_sections(flat: dict[str, Any], base: dict) -> dict[str, Any]:
    """An optional section (model.moe, model.mla) that the base lacks must be written whole."""
    out = dict(flat)
    for section in ("model.moe", "model.mla"):
        fields = {p: v for p, v in flat.items() if p.startswith(section + ".")}
        if fields and get_path(base, section) is None:
            for p in fields:
                out.pop(p)
            out[section] = {p[len(section) + 1:]: v for p, v in fields.items()}
    return out


def render_yaml(result: ImportResult, source: str, base: dict) -> str:
    header = [
        "# @package _global_",
        f"# Imported from the slime script {source} by `rlrun import slime`: the groups that match it",
        "# best, then only the settings where the script differs from them.",
        "defaults:",
        *[f"  - override /{g}: {result.choices[g].option}" for g in SCORED_GROUPS],
    ]
    body = _nest(_collapse_sections(result.overrides, base), base)
    text = "\n".join(header) + "\n"
    if body:
        text += "\n" + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=110)
    if result.filled:
        text += "\n# filled in with slime's/Megatron's value, as the script does not set the flag:\n"
        text += "".join(f"#   {p}: {result.overrides[p]!r}  ({flag} absent)\n" for p, flag in result.filled.items())
    if result.unknown:
        text += "\n# slime flags with no rlrun setting (not applied; kept here so that nothing is lost):\n"
        text += "".join(f"#   {_occ_text(o)}  [{o.where}] {why}\n" for o, why in result.unknown)
    return text


def _write_experiment(root: Path, name: str, text: str) -> None:
    (root / "experiment").mkdir(parents=True, exist_ok=True)
    (root / "experiment" / f"{name}.yaml").write_text(text)


def _load_text(text: str, name: str, config_dir: Any, derive_only: bool = False) -> Any:
    """Load the experiment from a scratch config dir (plus the caller's extra dir, copied beside it).
    derive_only: the composed dict with rlrun's derived values filled in, not validated."""
    import shutil

    from rlrun.config import load
    from rlrun.config.compose import compose
    from rlrun.config.derive import fill_derived

    # A scratch name: an older conf/experiment/NAME.yaml would otherwise shadow the new text.
    scratch = f"{name}-rlrun-import-check"
    with tempfile.TemporaryDirectory(prefix="rlrun-import-") as tmp:
        root = Path(tmp)
        if config_dir:
            shutil.copytree(config_dir, root, dirs_exist_ok=True)
        _write_experiment(root, scratch, text)
        if derive_only:
            return fill_derived(compose([f"experiment={scratch}"], config_dir=root, use_cache=False).raw)[0]
        return load([f"experiment={scratch}"], config_dir=root, use_cache=False)  # the dir is gone after this


def validate_yaml(text: str, name: str, config_dir: Any = None, sources: dict[str, str] | None = None) -> list[str]:
    from rlrun.config import ConfigError

    try:
        _load_text(text, name, config_dir)
    except ConfigError as exc:
        return [_named(p, sources) for p in exc.problems]
    return []


def _keep_followers(flat: dict[str, Any], values: dict[str, Any], base: dict, choices: dict[str, Choice], name: str,
                    config_dir: Any) -> dict[str, Any]:
    """A script value equal to its group's is left out, but where the group's value follows another setting
    (`train.gpus_per_node: ${hardware.gpus_per_node}`) that the import overrides, leaving it out would change it:
    such values are written."""
    from rlrun.config import ConfigError

    stub = ImportResult(name, "", choices, flat, [], [])
    try:
        got = _load_text(render_yaml(stub, "-", base), name, config_dir, derive_only=True)
    except ConfigError:
        return flat
    moved = {p: v for p, v in values.items() if p not in flat and get_path(base, p) is not None
             and not same(get_path(got, p), get_path(base, p))}
    return {**flat, **moved}


def _prune_derived(flat: dict[str, Any], base: dict, choices: dict[str, Choice], name: str,
                   config_dir: Any) -> dict[str, Any]:
    """Drop overrides of null-means-derived settings when rlrun derives the same value anyway
    (e.g. train.offload from the hardware default, rollout.num_gpus when colocated). rlrun's derivation runs
    on the composed dict, so this holds for a config that is invalid for another reason too (a follow-on
    value is then not written, and not blamed)."""
    from rlrun.config import ConfigError

    derived = {p for p in flat if p in RLRUN_DERIVED and get_path(base, p) is None}
    if not derived:
        return flat
    stub = ImportResult(name, "", choices, {p: v for p, v in flat.items() if p not in derived}, [], [])
    try:
        rlrun = _load_text(render_yaml(stub, "-", base), name, config_dir, derive_only=True)
    except ConfigError:  # the composition itself fails (reported by validate_yaml): keep every imported value
        return flat
    return {p: v for p, v in flat.items() if p not in derived or not same(get_path(rlrun, p), v)}
