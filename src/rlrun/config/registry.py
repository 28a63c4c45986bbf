"""The one registry of checks: a list of functions, a decorator that adds one, and run() that calls them all
and returns every problem (rules, capability checks, warnings and the preflight each hold one). Pure Python."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, TypeVar

from rlrun.config.errors import Problem

if TYPE_CHECKING:
    from rlrun.config.schema import RunConfig

F = TypeVar("F", bound=Callable[..., Any])


class Checks(Generic[F]):
    def __init__(self) -> None:
        self.fns: list[F] = []

    def __call__(self, fn: F) -> F:
        """Decorator: register `fn`."""
        self.fns.append(fn)
        return fn

    def __iter__(self):
        return iter(self.fns)

    def __len__(self) -> int:
        return len(self.fns)

    def run(self, *args: Any) -> list[Problem]:
        return [p for fn in self.fns for p in fn(*args)]


Rule = Callable[["RunConfig"], Iterable[Problem]]
# The cross-field rules `rlrun validate` runs (before Ray starts). A package registers its own rules here with
# @RULES from its module, and names that module in rlrun.config.kinds.PLUGINS (the one discovery mechanism:
# config imports no other rlrun package; the modules are imported on the first validation).
RULES: Checks[Rule] = Checks()
