"""tests/gpu runs on the lent GPUs only (tools/device/stage.sh installs megatron-core there).
Elsewhere every test here is skipped with the reason, so the CPU suite stays green."""
import importlib.util

import pytest
import torch

_REASON = None
if not torch.cuda.is_available():
    _REASON = "needs a CUDA GPU (run on the lent device: tools/device/README.md)"
elif importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    _REASON = "needs megatron-core (tools/device/stage.sh installs it on the device)"


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.skip(reason=_REASON))
