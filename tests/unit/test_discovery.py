"""The one discovery mechanism (rlrun.config.kinds.PLUGINS + resolve): every plugin module imports without torch
or ray (rlrun plan reads them), every kind it registers is in its registry, and every "module:attr" path a
registered spec holds resolves to a callable, so a renamed function or a moved module fails here, not in a run."""
import subprocess
import sys

from rlrun.config.kinds import (BACKENDS, ENGINES, ESTIMATORS, PLUGINS, REWARDS, ROUTERS, TRANSPORTS, paths,
                                plugin_modules, resolve)
from rlrun.config.registry import RULES


def test_every_registered_path_resolves():
    seen = 0
    for registry in (ENGINES, BACKENDS, ESTIMATORS, TRANSPORTS, REWARDS, ROUTERS):
        for name, spec in registry.items():
            for field, path in paths(spec).items():
                if registry is BACKENDS and field == "factory" and "megatron" in path:
                    continue  # megatron-core is not installed on the CPU machine (tests/gpu builds it)
                assert callable(resolve(path)), f"{registry.what}={name}: {field}={path!r}"
                seen += 1
    # engines' start, torch's factory, estimators' token rules + policy losses, rules, the router's factory
    assert seen >= 2 + 1 + 6 + 6 + 8 + 1


def test_the_built_in_kinds_come_from_their_plugin_modules():
    # found, not listed: every module of rlrun.rollout.transports, the spec.py of every rlrun.rollout.engines and
    # rlrun.rollout.routers package; the sglang_router kind is SGLang's, registered by the SGLang package's spec.py
    assert ENGINES.names() == ("hf", "sglang") and TRANSPORTS.names() == ("delta", "disk", "distributed", "tensor")
    assert ROUTERS.names() == ("sglang_router",)
    assert ROUTERS["sglang_router"].factory == "rlrun.rollout.engines.sglang.router.router:Router"
    assert plugin_modules()[:6] == ["rlrun.rollout.transports.delta", "rlrun.rollout.transports.disk",
                                    "rlrun.rollout.transports.nccl",
                                    "rlrun.rollout.transports.tensor", "rlrun.rollout.engines.hf.spec",
                                    "rlrun.rollout.engines.sglang.spec"]
    assert ENGINES["sglang"].args_key == "sglang" and ENGINES["sglang"].start.startswith("rlrun.rollout.engines.sglang.")
    assert len(RULES) > 30  # config's rule modules and rlrun.agent.rules, all through PLUGINS


def test_plugins_import_no_torch_and_no_ray():
    code = ("import sys; from rlrun.config.kinds import PLUGINS, discover; discover(); "
            "print(sorted(m for m in ('torch', 'ray', 'requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert all(p.startswith("rlrun.") for p in PLUGINS)


def test_the_order_of_the_built_in_kinds_does_not_depend_on_which_module_was_imported_first():
    """A spec module imported before the first discovery (a test, a plugin importing an engine's adapter) registers
    its kind first; the registries still list the built-ins in discovery order (the order error messages, the
    schema's choices and docs/CONTRACT.md show), then the others in registration order."""
    code = ("import rlrun.rollout.transports.tensor, rlrun.rollout.engines.sglang.spec; "
            "from rlrun.config.kinds import ENGINES, TRANSPORTS, EngineKind; "
            "ENGINES.register(EngineKind('aaa_plugin', needs_gpu=False)); "
            "print(ENGINES.names(), TRANSPORTS.names(), list(ENGINES)[:2])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == ("('hf', 'sglang', 'aaa_plugin') ('delta', 'disk', 'distributed', 'tensor') ['hf', 'sglang']"), \
        out.stdout + out.stderr
