"""rollout.weight_sync=delta into the real SGLang 0.5.16 server: SGLang has no /pull_weights (slime adds it by a
patch), so rlrun's adapter (SGLangEngine.pull_weights) applies the published versions to the host-local checkpoint
and SGLang's own /update_weights_from_disk loads it. Two pushes (a full version, then a delta changing one tensor):
after each the engine reports the version and generates with the pushed model's log-probs (tolerance: the module
docstring of test_sglang_engine.py), and the local checkpoint equals the pushed state bit for bit.

    python -m pytest -q tests/gpu/test_sglang_delta_weight_sync.py    (skips without SGLang / CUDA)
"""
import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None or not torch.cuda.is_available(),
                                reason="needs SGLang 0.5.16 and a CUDA GPU (tools/device/stage.sh)")


@pytest.mark.parametrize("encoding", ["xor"])
def test_two_delta_pushes_reach_a_real_sglang_engine(tmp_path, encoding):
    from safetensors.torch import load_file
    from test_sglang_engine import _cfg, _check_matches, _model, _save

    from rlrun.rollout.delta import FULL_FILE
    from rlrun.rollout.engines.group import EngineGroup
    from rlrun.rollout.engines.sglang.engine import SGLangEngine
    from rlrun.rollout.routers.protocol import run_router
    from rlrun.rollout.transports import delta

    cfg = _cfg(tmp_path)
    _save(cfg, 0, tmp_path / "m0")

    def launch(i):
        engine = SGLangEngine.from_config(cfg, rank=i, gpus=[0], log_dir=tmp_path, model_path=str(tmp_path / "m0"))
        engine.start(timeout_s=420)
        return engine

    router = run_router(cfg.rollout, tmp_path).start()
    group = EngineGroup(router, [launch(0)], launch, health_interval_s=1.0).start()
    try:
        model = _model(cfg, 1)
        state = {n: t.detach() for n, t in model.state_dict().items()}
        args = {"encoding": encoding, "checksum": "xxh3-128", "dir": None, "local_dir": str(tmp_path / "host")}
        keep, pub = {}, str(tmp_path / "weight_sync")
        delta.write(state, pub, keep, **args)
        delta.receive(group, pub, "1", None, **args)
        assert group.versions() == {group.urls[0]: "1"} and keep["last"]["full"] == 1
        _check_matches(router.url, model)

        with torch.no_grad():
            model.model.layers[0].mlp.down_proj.weight.mul_(-1)  # one tensor changes: the delta holds it alone
        state = {n: t.detach() for n, t in model.state_dict().items()}
        delta.write(state, pub, keep, **args)
        delta.receive(group, pub, "2", None, **args)
        last = keep["last"]
        assert group.versions() == {group.urls[0]: "2"} and last["full"] == 0
        w = model.model.layers[0].mlp.down_proj.weight
        assert last["changed_bytes"] <= w.numel() * w.element_size() < last["total_bytes"]
        _check_matches(router.url, model)
        held = load_file(str(tmp_path / "host" / FULL_FILE))
        assert all(torch.equal(held[n].view(torch.uint8), t.cpu().view(torch.uint8)) for n, t in state.items())
        print(f"SGLANG delta push: {last['bytes']} bytes written for {last['changed_bytes']} changed of "
              f"{last['total_bytes']}")
    finally:
        group.stop()
        router.stop()
