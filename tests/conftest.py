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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config, items):
    """The README's command runs the suite on 2 pytest-xdist workers with `--dist loadgroup`: every test module
    is one group (its module-scoped fixtures, e.g. a Ray cluster or a finished run that several tests read, are
    made once, on one worker) and tests/gpu is a single group (its tests share the one GPU, so they run one after
    another). Without xdist the marks do nothing."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            path = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group("tests/gpu" if path.startswith("tests/gpu/") else path))
