"""LoRA (model.lora) in the megatron backend on one GPU: the tiny Qwen3 with rank-8 adapters on every projection
and the embeddings trained whole (experiment=copy-grpo-lora-h100's settings), against the same backend without
LoRA and against peft (the torch backend's LoRA):

- step 0 is the base model: the same log-probs and the same exported weights (B = 0);
- train steps move the adapters and the saved embeddings only, the base weights stay bit-equal, and the
  distributed optimizer holds exactly the adapter's parameters (rlrun.config.params.lora_params);
- the merged export (what the engines receive) equals peft's merged weights given the same adapter, within one
  bf16 rounding of the merged weight (rel 4e-3: the export rounds W + scale B A, computed in fp32, to bf16);
- the adapter-only checkpoint is smaller than a full fine-tuning checkpoint and resumes exactly;
- train.offload moves the frozen base weights to the host and back.

The layer-level checks against peft (fp32, TP=1/2, sequence parallelism) are tests/gpu/lora_check.py's, run by
tools/device/cpu_lora_harness.py; test_lora_layers_match_peft runs them here in fp32 on the GPU too."""
import pytest
import torch

import parity as P
from test_megatron_backend import OVERRIDES, _assert_same_training, _batch

LORA = ["model.lora.rank=8", "model.lora.modules_to_save=[embed_tokens]"]
ON_CPU = False  # tools/device/cpu_lora_harness.py --backend runs these tests' functions on the CPU


def make(overrides):
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    keys = {o.split("=")[0] for o in overrides}  # an override here replaces test_megatron_backend's
    cfg = load([o for o in OVERRIDES if o.split("=")[0] not in keys] + overrides)
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    if ON_CPU:
        be.device = torch.device("cpu")
    be.init()
    return be


@pytest.fixture(scope="module")
def pair():
    return make(LORA), make([])


def _dir_bytes(path):
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_step0_is_the_base_model(pair):
    lo, base = pair
    b = _batch(lo.cfg.model.vocab_size)
    err = P.rel_err(torch.cat(lo.compute_log_probs(b)), torch.cat(base.compute_log_probs(b)))
    w_lo, w_base = lo.state_dict_for_sync(), base.state_dict_for_sync()
    print(f"LORA step 0: logp rel_err vs base {err:.3e}")
    # 0 expected (the same kernels; the hooks add exact zeros: 0.0 on the CPU harness); 1e-3, far below what a
    # non-zero adapter gives (the trained one moves the weights ~1e-1), leaves room for another cuBLAS algorithm
    assert err <= 1e-3
    assert w_lo.keys() == w_base.keys() and all(torch.equal(w_lo[k], w_base[k]) for k in w_base)


def test_training_moves_only_the_adapter_and_merged_export_matches_peft(pair, tmp_path):
    from rlrun.config.params import lora_params
    from rlrun.train import lora as torch_lora
    from rlrun.train.megatron import lora
    lo, base = pair
    gpt = lo.model.module
    frozen = {k: v.detach().clone() for k, v in gpt.named_parameters() if not v.requires_grad}
    trained = {k: v.detach().clone() for k, v in gpt.named_parameters() if v.requires_grad}
    held = sum(p.numel() for o in lo._inner_optimizers() for g in o.optimizer.param_groups for p in g["params"])
    assert held == lora_params(lo.cfg.model) == 16384 + 64 * 64  # adapters of 7 projections x 2 layers + embeddings
    metrics = [lo.train_step(_batch(lo.cfg.model.vocab_size, seed=s)) for s in (1, 2, 3)]
    print("LORA metrics", [{k: round(v, 5) for k, v in m.items() if k in ("train/loss", "train/grad_norm")}
                           for m in metrics])
    assert all(torch.equal(v, frozen[k]) for k, v in gpt.named_parameters() if not v.requires_grad)
    assert all(not torch.equal(v, trained[k]) for k, v in gpt.named_parameters() if v.requires_grad)

    # peft on the HF model of the same base weights, given the trained adapter (peft's file format)
    hf = P.hf_causal_lm(lo.cfg.model, torch.float32)
    hf.load_state_dict({k: v.float() for k, v in base.state_dict_for_sync().items()})
    pm = torch_lora.wrap(hf, lo.cfg.model.lora)
    from peft import set_peft_model_state_dict
    res = set_peft_model_state_dict(pm, {k: v.float().cpu() for k, v in lora.adapter_state(
        lo.model, lo.cfg.model, lo.cfg.model.lora).items()})
    assert not res.unexpected_keys
    want, got = torch_lora.merged_state_dict(pm), lo.state_dict_for_sync()
    assert got.keys() == want.keys()
    worst = max(P.rel_err(got[k].float().cpu(), want[k].float()) for k in want)
    moved = max(P.rel_err(got[k].float().cpu(), base.state_dict_for_sync()[k].float().cpu()) for k in want)
    print(f"LORA merged export vs peft merged: max rel_err {worst:.3e} (the adapters moved the weights {moved:.3e})")
    assert worst < 4e-3 < moved  # one bf16 rounding of the merged weights (module docstring)


def test_adapter_checkpoint_is_smaller_and_resumes(pair, tmp_path):
    lo, base = pair
    base.train_step(_batch(base.cfg.model.vocab_size, seed=1))  # its Adam moments exist, as the LoRA run's do
    base.save(str(tmp_path / "full"))
    lo.save(str(tmp_path / "lora"))
    full_b, lora_b = _dir_bytes(tmp_path / "full"), _dir_bytes(tmp_path / "lora")
    print(f"LORA checkpoint {lora_b} B vs full fine-tuning {full_b} B")
    assert (tmp_path / "lora" / "model" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "lora" / "model" / "adapter_config.json").is_file()
    assert not (tmp_path / "lora" / "model" / "model.safetensors").exists()
    assert lora_b < 0.5 * full_b  # adapter + embeddings 20k of the model's ~78k params, with their Adam state
    saved = lo.state_dict_for_sync()
    lo.train_step(_batch(lo.cfg.model.vocab_size, seed=4))
    assert any(not torch.equal(saved[k], v) for k, v in lo.state_dict_for_sync().items())
    lo.load(str(tmp_path / "lora"))
    assert all(torch.equal(saved[k], v) for k, v in lo.state_dict_for_sync().items())
    with pytest.raises(RuntimeError, match="LoRA adapter only"):
        base.load(str(tmp_path / "lora"))
    with pytest.raises(RuntimeError, match="saved without LoRA"):
        lo.load(str(tmp_path / "full"))


def test_offload_moves_the_frozen_base_weights(pair):
    lo, _ = pair
    if lo.device.type != "cuda":
        pytest.skip("train.offload moves GPU memory to the host")
    before = lo.state_dict_for_sync()
    lo.offload()
    assert lo.frozen_params and all(p.device.type == "cpu" for p in lo.frozen_params)
    lo.onload()
    assert all(p.device == lo.device for p in lo.frozen_params)
    assert all(torch.equal(before[k], v) for k, v in lo.state_dict_for_sync().items())


def test_wgrad_fusion_with_frozen_base_matches_unfused():
    """train.gradient_accumulation_fusion=true with LoRA: megatron-core's frozen-weight linear path for the base,
    the adapters' grads through the DDP hook; the same two steps as unfused (test_megatron_backend's bounds)."""
    if ON_CPU:
        pytest.skip("the fused wgrad GEMM needs CUDA")
    runs = []
    for fused in ("false", "true"):
        be = make(LORA + [f"train.gradient_accumulation_fusion={fused}"])
        metrics = [be.train_step(_batch(be.cfg.model.vocab_size, seed=s)) for s in (3, 4)]
        runs.append((metrics, be.state_dict_for_sync()))
        del be
    (m0, w0), (m1, w1) = runs
    _assert_same_training("LORA WGRAD", m0, m1, w0, w1, loss_tol=1e-3, norm_tol=1e-2, weight_tol=1e-2)


@pytest.mark.parametrize("family,targets,save", [
    ("qwen3", None, []), ("qwen3", ["q_proj", "v_proj", "down_proj"], ["model.norm"]),
    ("llama", ["k_proj", "up_proj", "o_proj"], ["embed_tokens"])])
def test_lora_layers_match_peft(family, targets, save):
    """fp32 on the GPU: tests/gpu/lora_check.py's checks (tolerances as in tools/device/cpu_lora_harness.py, with
    GPU kernels' summation orders: 1e-4 for logits, 1e-3 for adapters after three SGD steps at lr 1)."""
    import lora_check as L
    from megatron.core import parallel_state as ps
    if ON_CPU:
        pytest.skip("cpu_lora_harness.py runs these on the CPU")
    ps.destroy_model_parallel()  # the backends' groups: rebuilt for the bare models here
    lo = L.lora_section(save=save) if targets is None else L.lora_section(targets=targets, save=save)
    L.check(family, lo, 1, torch.float32, "cuda", 1e-4, 1e-3)
    ps.destroy_model_parallel()
