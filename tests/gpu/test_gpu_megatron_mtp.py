"""Multi-token prediction on the megatron backend on one GPU (megatron-core of the device, 0.19.2): the whole backend
(MegatronBackend.init / compute_log_probs / train_step / state_dict_for_sync) on a tiny MiMo-shaped checkpoint (the
Qwen2 layout plus one MTP layer under MiMo's names: model.mtp_layers.0.*), written to a folder as safetensors.

- the checkpoint's MTP tensors come back in the weight sync (bf16 of the loaded values);
- the actor's log-probs are bit-identical to those of a backend built without MTP layers from the same checkpoint
  (the main head does not see the MTP block);
- train.mtp.enabled: a step logs a finite train/mtp_loss, about ln(vocab) for random weights (0.5x to 2x: a loss off
  by a row or a mask is still a cross entropy of that size, the CPU tests check its value), and moves the MTP weights;
- off: no train/mtp_loss, the MTP weights stay as loaded while the main ones move.
The loss's value against a hand computation, the names and the independent MTP forward are the CPU tests'
(tests/unit/test_megatron_mtp.py)."""
import json
import math

import pytest
import torch

import parity as P

BASE = ["model=tiny", "model.family=qwen2", "model.add_qkv_bias=true", "model.qk_layernorm=false",
        "model.tie_word_embeddings=false", "hardware=h100", "train.backend=megatron",
        "train.gradient_accumulation_fusion=false", "rollout.max_response_len=64", "eval.max_response_len=64",
        "train.max_tokens_per_gpu=96", "train.log_probs_max_tokens_per_gpu=96", "optim.lr=1e-3",
        "optim.weight_decay=0.0"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny MiMo-shaped HF folder: transformers' Qwen2 of num_layers + 1 layers, its last layer renamed to MiMo's
    MTP layer, with the MTP layer's own tensors; config.json says num_nextn_predict_layers=1."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from rlrun.config import load
    from rlrun.train.hf_model import hf_config
    out = tmp_path_factory.mktemp("mimo")
    model = load(BASE).model
    n, h = model.num_layers, model.hidden_size
    big = model.model_copy(update={"num_layers": n + 1})
    torch.manual_seed(0)
    sd = AutoModelForCausalLM.from_config(hf_config(big), dtype=torch.float32).state_dict()
    sd = {k.replace(f"model.layers.{n}.", "model.mtp_layers.0."): v for k, v in sd.items()}
    g = torch.Generator().manual_seed(1)
    sd.update({"model.mtp_layers.0.input_proj.weight": torch.randn(h, 2 * h, generator=g) / h ** 0.5,
               "model.mtp_layers.0.token_layernorm.weight": 1 + 0.1 * torch.randn(h, generator=g),
               "model.mtp_layers.0.hidden_layernorm.weight": 1 + 0.1 * torch.randn(h, generator=g),
               "model.mtp_layers.0.final_layernorm.weight": 1 + 0.1 * torch.randn(h, generator=g)})
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(hf_config(model).to_dict() | {"num_nextn_predict_layers": 1}))
    return out, {k: v.to(torch.bfloat16) for k, v in sd.items() if ".mtp_layers." in k}


def _backend(checkpoint, *extra):
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    cfg = load([*BASE, f"checkpoint.hf={checkpoint[0]}", *extra])
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    be.init()
    return cfg, be


_batch = P.train_batch


def _mtp(state):
    return {k: v for k, v in state.items() if ".mtp_layers." in k}


def test_mtp_training_step_syncs_trains_and_leaves_log_probs_alone(checkpoint):
    cfg, be = _backend(checkpoint, "model.mtp_num_layers=1", "train.mtp.enabled=true",
                       "train.mtp.loss_scaling_factor=0.5")
    before = be.state_dict_for_sync()
    loaded = checkpoint[1]
    assert _mtp(before).keys() == loaded.keys()
    assert all(torch.equal(before[k].cpu().to(torch.bfloat16), v) for k, v in loaded.items())
    b = _batch(cfg.model.vocab_size)
    logp = be.compute_log_probs(b)
    _, plain = _backend(checkpoint, "model.mtp_num_layers=0")
    assert all(torch.equal(x, y) for x, y in zip(logp, plain.compute_log_probs(b)))
    del plain
    m = be.train_step(_batch(cfg.model.vocab_size, seed=1))
    print("MTP train step", {k: round(v, 5) for k, v in m.items()})
    ln_v = math.log(cfg.model.vocab_size)
    assert math.isfinite(m["train/mtp_loss"]) and 0.5 * ln_v < m["train/mtp_loss"] < 2 * ln_v
    after = be.state_dict_for_sync()
    # every MTP matrix moves; the norms' weights start at 1.0, where a bf16 step (2^-7 = 7.8e-3) is wider than one Adam
    # step at lr 1e-3, so the synced bf16 copy of a norm keeps its value (seen on the H200, 2026-11-28: all five norms)
    matrices = [k for k, v in loaded.items() if v.dim() > 1]
    moved = [k for k in matrices if not torch.equal(after[k], before[k])]
    assert matrices and moved == matrices, sorted(set(matrices) - set(moved))


def test_mtp_frozen_when_training_is_off(checkpoint):
    cfg, be = _backend(checkpoint, "model.mtp_num_layers=1")
    before = be.state_dict_for_sync()
    m = be.train_step(_batch(cfg.model.vocab_size, seed=2))
    assert "train/mtp_loss" not in m
    after = be.state_dict_for_sync()
    assert all(torch.equal(after[k], before[k]) for k in checkpoint[1])
    assert any(not torch.equal(after[k], before[k]) for k in before if ".mtp_layers." not in k)
