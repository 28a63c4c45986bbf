"""Resolved dict -> frozen RunConfig, or ConfigError with every problem: derivation problems, schema
problems (types, enums, ranges, unknown keys with a did-you-mean) and the cross-field rules."""
from __future__ import annotations

from typing import Any, Optional, get_args

from pydantic import BaseModel, ValidationError

from rlrun.config import rules
from rlrun.config.derive import fill_derived
from rlrun.config.errors import ConfigError, Problem, closest, did_you_mean
from rlrun.config.schema import RunConfig


def validate(raw: dict[str, Any], *, check_rules: bool = True) -> RunConfig:
    filled, problems = fill_derived(raw)
    cfg: Optional[RunConfig] = None
    schema: list[Problem] = []
    try:
        cfg = RunConfig.model_validate(filled)
    except ValidationError as e:
        # A derivation that failed leaves its paths null; pydantic's "got None" there repeats it.
        covered = {path for p in problems for path in p.covers}
        schema = [p for p in problems_from_pydantic(e, filled) if not (p.value is None and p.path in covered)]
        schema = _without_follow_ons(schema, raw, problems)
        problems += schema
    if cfg is not None and check_rules:
        problems += rules.check(cfg)
    if problems:
        err = ConfigError(_dedupe(problems))
        err.schema_paths = frozenset(p.path for p in schema)  # type: ignore[attr-defined]  # see load()
        raise err
    assert cfg is not None
    return cfg


def _without_follow_ons(schema: list[Problem], raw: dict, derived: list[Problem]) -> list[Problem]:
    """A key the YAML leaves null (derived) has no problem of its own when another one is reported: it
    either copied a bad value from its source (optim.critic_lr <- optim.lr=abc) or stayed null because
    its inputs were broken (train=3 leaves rollout.num_gpus underivable)."""
    def derived_key(p: Problem) -> bool:
        return _get(raw, tuple(p.path.split("."))) is None and p.path.count(".") > 0

    own = [p for p in schema if not derived_key(p)]
    if not own and not derived:
        return schema
    return own + [p for p in schema if derived_key(p) and p.value is not None
                  and all(p.value != q.value for q in own)]


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        key = (p.path, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The pydantic model class that owns the field at `loc` (None for dict/list nodes)."""
    model: Any = RunConfig
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = next((a for a in (field.annotation, *get_args(field.annotation))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            for a in get_args(field.annotation):  # list[EvalDataset], Optional[MoESection]
                model = next((b for b in get_args(a) if isinstance(b, type) and issubclass(b, BaseModel)), model)
    return model


def _get(raw: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def problems_from_pydantic(err: ValidationError, raw: dict) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and "[" in p))  # drop union tags
        path = ".".join(str(p) for p in loc)
        kind, value = e["type"], _get(raw, loc)
        if kind == "extra_forbidden":
            owner = _model_at(loc[:-1])
            options = list(owner.model_fields) if owner else []
            best = closest(str(loc[-1]), options)
            parent = ".".join(str(p) for p in loc[:-1])
            out.append(Problem(path, f"unknown key {loc[-1]!r}{did_you_mean(str(loc[-1]), options)}",
                               f"rename it to {parent + '.' if parent else ''}{best}" if best else
                               f"remove it; valid keys{' under ' + parent if parent else ''}: {', '.join(options)}",
                               value))
        elif kind == "missing":
            out.append(Problem(path, "is missing", f"add {path} (its default belongs in conf/; "
                                                   "`rlrun --cfg job` shows the tree)"))
        elif kind == "literal_error":
            expected = e.get("ctx", {}).get("expected", "")
            options = [o.strip().strip("'") for o in expected.replace(" or ", ",").split(",") if o.strip()]
            out.append(Problem(path, f"{value!r} is not allowed{did_you_mean(str(value), options)}",
                               _one_of(raw, loc, path, options), value))
        else:
            out.append(Problem(path, f"{e['msg']} (got {value!r})", _fix_for(kind, path, e.get("ctx", {})), value))
    return out


_PROBING = False  # _one_of validates variants of the config: no probing inside those


def _one_of(raw: dict, loc: tuple, path: str, options: list[str]) -> str:
    """`use one of: ...` naming only the options the rest of this config takes (sglang on hardware=cpu is not
    one: its own rule refuses it), each refused option with the reason, so the printed fix leads to a valid
    config."""
    global _PROBING
    if _PROBING:
        return f"use one of: {', '.join(options)}"
    import copy

    refused: dict[str, str] = {}
    _PROBING = True
    try:
        for option in options:
            variant = copy.deepcopy(raw)
            node = variant
            for part in loc[:-1]:
                node = node[part]
            node[loc[-1]] = option
            try:
                validate(variant)
            except ConfigError as e:
                refused.update({option: p.message for p in e.problems if p.path == path})
            except Exception:  # noqa: BLE001 - a variant that cannot even be built says nothing about the option
                pass
    finally:
        _PROBING = False
    ok = [o for o in options if o not in refused]
    if not refused or not ok:
        return f"use one of: {', '.join(options)}"
    return f"use one of: {', '.join(ok)} ({'; '.join(f'{o}: {why}' for o, why in refused.items())})"


def _fix_for(kind: str, path: str, ctx: dict) -> str:
    bounds = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
              "less_than_equal": "<= {le}", "string_too_short": "a non-empty string"}
    if kind in bounds:
        return f"set {path} to a value {bounds[kind].format(**ctx)}"
    if kind.startswith("int_") or kind.startswith("float_") or kind.startswith("bool_"):
        return f"set {path} to a {kind.split('_')[0]} (e.g. {path}={ {'int': 1, 'float': 1.0, 'bool': 'true'}[kind.split('_')[0]]})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{path} is a section: set its keys (e.g. {path}.<key>=...), not the section itself"
    return f"fix the value of {path}"
