"""A Megatron torch_dist checkpoint (megatron-core dist_checkpointing, the format slime's --ref-load / --load
folders hold) loads into rlrun's megatron backend on one GPU:

- save_torch_dist writes Megatron-LM's layout (latest_checkpointed_iteration.txt + iter_0000000/ with .metadata
  and __*.distcp) from a GPTModel; load_torch_dist reads it into a freshly built GPTModel with other random
  weights, which then equal the saved ones exactly (the same dtype both ways: no tolerance);
- the backend builds its reference model from checkpoint.ref = that folder when checkpoint.hf is null (slime's
  --ref-load without an HF source), and the reference weights equal the saved ones.
Run on the lent GPU: `python -m pytest -x -q tests/gpu/test_megatron_torch_dist.py`.
"""
import pytest
import torch

OVERRIDES = ["model=tiny", "hardware=h100", "train.backend=megatron", "train.gradient_accumulation_fusion=false",
             "rollout.max_response_len=64", "eval.max_response_len=64", "train.max_tokens_per_gpu=96",
             "train.log_probs_max_tokens_per_gpu=96", "algo.use_kl_loss=true", "algo.kl_loss_coef=0.01"]


@pytest.fixture(scope="module")
def backend():
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    meg = MegatronBackend(load(OVERRIDES), rank=0, world_size=1, gpu_id=0, total_steps=10)
    meg.init()
    yield meg
    meg.shutdown()


def _weights(gpt) -> dict:
    return {k: v.detach().clone() for k, v in gpt.state_dict().items() if not k.endswith("_extra_state")}


def test_torch_dist_round_trip_into_a_fresh_model(backend, tmp_path):
    from rlrun.config.torch_dist import dist_checkpoint_dir
    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron.dist_ckpt import load_torch_dist, save_torch_dist

    source = mm.build_gpt(backend.cfg.model, backend.tconfig).to(backend.device)
    shards = save_torch_dist(source, tmp_path / "Tiny_torch_dist")
    assert (shards / ".metadata").is_file() and any(shards.glob("__*.distcp"))
    assert dist_checkpoint_dir(tmp_path / "Tiny_torch_dist") == shards
    saved = _weights(source)
    torch.manual_seed(1234)
    target = mm.build_gpt(backend.cfg.model, backend.tconfig).to(backend.device)
    assert any(not torch.equal(saved[k], v) for k, v in _weights(target).items())  # other random weights
    assert load_torch_dist(target, tmp_path / "Tiny_torch_dist") == shards
    got = _weights(target)
    assert set(got) == set(saved) and all(torch.equal(saved[k], got[k]) for k in saved)


def test_backend_reference_model_from_torch_dist_ref(backend, tmp_path):
    from rlrun.config import load
    from rlrun.train.megatron.dist_ckpt import save_torch_dist
    from rlrun.train.megatron_backend import MegatronBackend

    save_torch_dist(backend.ref, tmp_path / "ref_torch_dist")
    saved = _weights(backend.ref)
    cfg = load(OVERRIDES + ["run.seed=7"])
    cfg = cfg.model_copy(update={"checkpoint": cfg.checkpoint.model_copy(
        update={"hf": None, "ref": str(tmp_path / "ref_torch_dist")})})
    other = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    other.init()  # a second backend in the process, as test_megatron_backend's wgrad test builds one
    got = _weights(other.ref)
    del other
    assert set(got) == set(saved) and all(torch.equal(saved[k], got[k]) for k in saved)
