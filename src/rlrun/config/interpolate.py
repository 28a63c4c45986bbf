"""${dotted.path} interpolations of an unresolved config tree, resolved like OmegaConf (rlrun.config.compose and
rlrun.config.points both resolve through here). Pure Python; OmegaConf only for resolvers beyond plain paths."""
from __future__ import annotations

import re
from typing import Any

from rlrun.config.errors import ConfigError, Problem

REF = re.compile(r"\$\{([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)\}")
MISSING = object()


def interpolation_problem(e: Exception) -> Problem:
    key = getattr(e, "full_key", "") or ""
    return Problem(str(key), f"cannot resolve an interpolation: {getattr(e, 'msg', e)}",
                   "point ${...} at an existing key, e.g. ${model.name}")


def walk(tree: dict, parts: list[str]) -> Any:
    node: Any = tree
    for p in parts:
        if not isinstance(node, dict) or p not in node:
            return MISSING
        node = node[p]
    return node


def resolve(tree: dict) -> dict:
    """Resolve ${dotted.path} references like OmegaConf (a whole-string reference keeps the type)."""
    if not _has_interpolation(tree):
        return tree
    if _needs_omegaconf(tree):
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            return OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError([interpolation_problem(e)]) from None

    def value_at(ref: str, seen: tuple[str, ...]) -> Any:
        if ref in seen:
            raise ConfigError([Problem(ref, f"interpolation cycle: {' -> '.join(seen + (ref,))}",
                                       "break the cycle of ${...} references")])
        v = walk(tree, ref.split("."))
        if v is MISSING:
            raise ConfigError([Problem(seen[-1] if seen else ref, f"interpolation ${{{ref}}} points at no key",
                                       "point ${...} at an existing key, e.g. ${model.name}")])
        return sub(v, seen + (ref,))

    def sub(v: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(v, dict):
            return {k: sub(x, seen) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x, seen) for x in v]
        if isinstance(v, str) and "${" in v:
            m = REF.fullmatch(v)
            if m:
                return value_at(m.group(1), seen)
            return REF.sub(lambda mm: str(value_at(mm.group(1), seen)), v)
        return v

    return sub(tree, ())


def _strings(v: Any):
    if isinstance(v, dict):
        for x in v.values():
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)
    elif isinstance(v, str):
        yield v


def _has_interpolation(tree: dict) -> bool:
    return any("${" in s for s in _strings(tree))


def _needs_omegaconf(tree: dict) -> bool:
    # Anything beyond plain ${a.b} references (resolvers, escapes, nesting) is OmegaConf's business.
    return any("${" in REF.sub("", s) or "\\${" in s for s in _strings(tree))
