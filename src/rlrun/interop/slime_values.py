"""Small value helpers shared by the slime encoder and decoder: formatting, comparison, path lookup and
slime's default for an absent flag."""

from __future__ import annotations

import math
import re
from typing import Any

from rlrun.interop.slime_table import KEEP, Row


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
