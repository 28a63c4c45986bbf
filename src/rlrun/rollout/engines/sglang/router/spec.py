"""The sglang_router router kind's spec (pure: rlrun plan reads it). Its policies are sglang-router 0.3.2's
(`--policy`, checked with `sglang-router launch --help`). Imported by ../spec.py, so discovery of the
engine kinds registers it."""
from __future__ import annotations

from rlrun.config.kinds import ROUTERS, RouterKind

SPEC = ROUTERS.register(RouterKind("sglang_router", policies=("cache_aware", "round_robin", "random", "power_of_two"),
                                   factory="rlrun.rollout.engines.sglang.router.router:Router",
                                   packages=("sglang-router",)))
