import os
import sys
import tempfile

import pytest

# config layer: keep rlrun's composition cache (rlrun/config/cache.py) out of the user's home during tests.
os.environ.setdefault("RLRUN_CACHE_DIR", tempfile.mkdtemp(prefix="rlrun-test-cache-"))

# RLRUN_SLIME_DIR: a slime checkout, on sys.path before any test imports rlrun.agent.slime_compat, so
# that slime's own Sample / GenerateState / post are the ones slime functions get (tests/*/test_*slime*).
if os.environ.get("RLRUN_SLIME_DIR"):
    sys.path.append(os.environ["RLRUN_SLIME_DIR"])

# Property tests draw the same examples on every run (no test may depend on luck): hypothesis
# derives its examples from each test's source instead of a random seed, and keeps no database.
from hypothesis import settings  # noqa: E402

settings.register_profile("rlrun", derandomize=True, database=None, print_blob=True)
settings.load_profile("rlrun")


@pytest.fixture
def gpu_machine(monkeypatch):
    """This CPU machine as the preflight's embedded-Ray check sees a GPU node: 8 GPUs of each vendor, sglang and
    megatron-core importable (rlrun.launch.preflight.embedded_ray), for preflight tests of GPU configs about
    something else. The check itself runs unpatched on this machine in tests/unit/test_embedded_ray.py."""
    import rlrun.launch.preflight as pf

    monkeypatch.setattr(pf, "GPU_COUNTERS", {vendor: (lambda: 8) for vendor in pf.GPU_COUNTERS})
    monkeypatch.setattr(pf, "importable", lambda module: True)


# The order in which --dist loadfile hands out test modules: the GPU tests (slow on a GPU machine, skipped here),
# then the integration tests (tens of seconds each: Ray clusters, runs, subprocesses), then the unit tests (mostly
# fractions of a second). xdist's own order (most tests first) hands out the integration modules, which hold few
# tests each, last: the suite then ended with one worker busy on a 60-110 s module while the other had nothing
# left, and a worker holding at most two pending tests takes another module, so it could hold three of them.
# Slow modules first and many small ones last keep both workers busy to the end.
SCOPE_ORDER = ("tests/gpu", "tests/integration/")


def scope_rank(scope: str) -> int:
    """Where a test module (a --dist loadfile unit) goes in the queue: SCOPE_ORDER's index, the rest after."""
    return next((i for i, prefix in enumerate(SCOPE_ORDER) if scope.startswith(prefix)), len(SCOPE_ORDER))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """The README's command runs the suite on 2 pytest-xdist workers with `--dist loadfile`: each test module runs
    whole on one worker, so its module-scoped fixtures (a Ray cluster, a finished run that several tests read) are
    made once. tests/gpu is one unit as well: its modules share the one GPU, so they run one after another. Units
    are handed out in SCOPE_ORDER (slow ones first), each group in xdist's own order."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GpuTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/gpu" if nodeid.startswith("tests/gpu/") else super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            # the queue is an OrderedDict that the base class pops from the front; sorted() is stable
            for scope in sorted(self.workqueue, key=scope_rank):
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return GpuTestsTogether(config, log)


def _hf_engines(tmp_path_factory, n: int):
    """n hf engine processes (the tiny model, seed 0) behind a real sglang-router: a generator for a module fixture."""
    from rlrun.rollout.engines.group import local_engine_group
    from rlrun.rollout.tiny_model import save_tiny_model

    tmp = tmp_path_factory.mktemp("engine")
    with local_engine_group(save_tiny_model(tmp / "tiny", seed=0), n, router="sglang_router", log_dir=tmp / "logs",
                            health_interval_s=5, startup_timeout_s=60) as grp:
        yield grp


@pytest.fixture(scope="module")
def hf_engine_group(tmp_path_factory):
    """One hf engine process (the tiny model, seed 0) behind a real sglang-router, for a test module."""
    yield from _hf_engines(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def hf_engine_pair(tmp_path_factory):
    """Two hf engine processes (the tiny model, seed 0) behind one real sglang-router, for a test module."""
    yield from _hf_engines(tmp_path_factory, 2)
