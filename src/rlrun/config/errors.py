"""Config problems: every check reports a Problem (dotted path, what is wrong, the value, how to fix it);
ConfigError carries all of them at once so that a user fixes a config in one pass, not one error per run."""
from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class Problem:
    path: str          # dotted config path, e.g. "train.global_batch_size" ("" for the whole config)
    message: str       # what is wrong, with the values involved
    fix: str           # a concrete change that makes it valid
    value: Any = None  # the offending value (JSON-friendly)
    # paths this problem leaves unset (a derivation that could not run): the schema's "got None" at
    # any of them would only repeat it, so validate() drops those follow-ons in one place
    covers: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __str__(self) -> str:
        where = self.path or "<config>"
        return f"{where}: {self.message}\n    fix: {self.fix}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("covers")
        try:
            json.dumps(d["value"])
        except (TypeError, ValueError):
            d["value"] = repr(d["value"])
        return d


class ConfigError(Exception):
    """Raised by rlrun.config.load with every problem found; the CLI prints them and exits 2."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = f"invalid config: {n} problem{'s' if n != 1 else ''}"
        return "\n".join([head] + [f"  {i + 1}. {p}" for i, p in enumerate(self.problems)])

    @property
    def paths(self) -> list[str]:
        return [p.path for p in self.problems]

    def to_dict(self) -> dict:
        return {"valid": False, "problems": [p.to_dict() for p in self.problems]}


def closest(name: str, options: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(str(name), sorted(set(map(str, options))), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the closest option, or '' when nothing is close."""
    best = closest(name, options)
    return f' (did you mean "{best}"?)' if best else ""


class UsageError(Exception):
    """A command line rlrun cannot parse (exit 2, no traceback): raised by the CLI and the commands it runs."""
