"""LoRA (model.lora) in the torch backend: only the adapter trains and is saved, the engines get merged weights
under the HF names, the memory estimate and the rules. peft is real (the version pyproject.toml pins)."""
from __future__ import annotations

import pytest
import torch

from rlrun.config import ConfigError, load
from rlrun.config.memory import estimate
from rlrun.config.params import lora_params

from train_fixtures import toy_batch, torch_backend



def test_adapter_parameters_counted_by_hand():
    m = load(["model.lora.rank=8"]).model  # tiny: hidden 64, 4 heads x 16, 2 KV groups, ffn 128, 2 layers
    # per layer: q 8*(64+64) + k 8*(64+32) + v 8*(64+32) + o 8*(64+64) + gate, up 8*(64+128) each + down 8*(128+64)
    per_layer = 8 * (128 + 96 + 96 + 128 + 192 * 3)
    assert lora_params(m) == 2 * per_layer == 16384  # peft's print_trainable_parameters says 16,384 too
    # modules trained whole: the tied embeddings 64 x 64 once, the final norm 64, q_norm 16 in each of 2 layers
    saved = load(["model.lora.rank=8", "model.lora.modules_to_save=[embed_tokens,lm_head,model.norm,q_norm]"]).model
    assert lora_params(saved) == 16384 + 64 * 64 + 64 + 2 * 16


def test_only_the_adapter_is_in_the_optimizer_and_it_trains():
    b = torch_backend("model.lora.rank=8")
    opt_params = [p for g in b.opt.param_groups for p in g["params"]]
    assert sum(p.numel() for p in opt_params) == 16384
    base = {k: v.clone() for k, v in b.model.named_parameters() if not v.requires_grad}
    before = b.state_dict_for_sync()
    full = torch_backend()
    assert before.keys() == full.state_dict_for_sync().keys()  # the engines' HF names
    assert all(torch.equal(before[k], full.state_dict_for_sync()[k]) for k in before)  # B = 0: the base model
    b.train_step(toy_batch())
    assert all(torch.equal(v, dict(b.model.named_parameters())[k]) for k, v in base.items())  # base frozen
    after = b.state_dict_for_sync()
    changed = [k for k in after if not torch.equal(after[k], before[k])]
    assert changed and all(k.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj") for k in changed)


def test_merged_weights_are_w_plus_scaled_b_a():
    b = torch_backend("model.lora.rank=4", "model.lora.alpha=8")
    layer = b.model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_()
    w, a_, b_ = layer.base_layer.weight, layer.lora_A["default"].weight, layer.lora_B["default"].weight
    want = w + (8 / 4) * b_ @ a_
    got = b.state_dict_for_sync()["model.layers.0.self_attn.q_proj.weight"]
    assert torch.allclose(got, want, atol=1e-6)  # fp32 matmul of 16x4 @ 4x64 entries of order 1


def test_checkpoints_hold_the_adapter_only_and_load_back(tmp_path):
    b = torch_backend("model.lora.rank=8")
    b.train_step(toy_batch())
    b.save(str(tmp_path / "lora"))
    full = torch_backend()
    full.train_step(toy_batch())
    full.save(str(tmp_path / "full"))
    size = lambda d: sum(f.stat().st_size for f in (tmp_path / d).rglob("*") if f.is_file())  # noqa: E731
    assert size("lora") < 0.4 * size("full")  # adapter 16k of 78k params, with its Adam moments
    assert not list((tmp_path / "lora" / "model").glob("model*.safetensors"))
    again = torch_backend("model.lora.rank=8")
    again.load(str(tmp_path / "lora"))
    got, want = again.state_dict_for_sync(), b.state_dict_for_sync()
    assert all(torch.equal(got[k], want[k]) for k in want)
    with pytest.raises(RuntimeError, match="without LoRA"):
        torch_backend("model.lora.rank=8").load(str(tmp_path / "full"))


def test_modules_to_save_train_whole_and_reach_the_engines_and_the_checkpoint(tmp_path):
    """model.lora.modules_to_save: the token embeddings (64 x 64, tied to the output layer: experiment=tiny-lora-cpu)
    train whole beside the adapter and stay tied; the engines get the trained copy under the HF names, the adapter
    checkpoint holds it; the final RMSNorm alike (64 weights)."""
    b = torch_backend("model.lora.rank=8", "model.lora.modules_to_save=[embed_tokens]")
    assert sum(p.numel() for g in b.opt.param_groups for p in g["params"]) == 16384 + 64 * 64  # tied: one copy
    before = b.state_dict_for_sync()
    assert before.keys() == torch_backend().state_dict_for_sync().keys()  # no peft name reaches the engines
    b.train_step(toy_batch())
    after = b.state_dict_for_sync()
    assert not torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])  # its trained copy
    assert "lm_head.weight" not in after or torch.equal(after["lm_head.weight"], after["model.embed_tokens.weight"])
    assert torch.equal(after["model.norm.weight"], before["model.norm.weight"])
    b.save(str(tmp_path / "lora"))
    again = torch_backend("model.lora.rank=8", "model.lora.modules_to_save=[embed_tokens]")
    again.load(str(tmp_path / "lora"))
    assert torch.equal(again.state_dict_for_sync()["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    norm = torch_backend("model.lora.rank=8", "model.lora.modules_to_save=[model.norm]")
    assert sum(p.numel() for g in norm.opt.param_groups for p in g["params"]) == 16384 + 64
    norm.train_step(toy_batch())
    assert not torch.equal(norm.state_dict_for_sync()["model.norm.weight"], before["model.norm.weight"])


def test_memory_estimate_counts_grads_and_adam_for_the_adapter_only():
    full, lo = estimate(load([])), estimate(load(["model.lora.rank=8"]))
    gib = 2 ** 30
    assert lo.trainer_grads == pytest.approx(4 * 16384 / gib) and lo.trainer_optimizer == pytest.approx(8 * 16384 / gib)
    assert lo.trainer_weights == pytest.approx(full.trainer_weights + 4 * 16384 / gib)


@pytest.mark.parametrize("overrides,key", [
    (["model.lora.alpha=32"], "model.lora.alpha"),                               # rank 0: ignored
    (["model.lora.rank=8", "model.lora.target_modules=[qkv]"], "model.lora.target_modules"),
    (["model.lora.rank=8", "algo=ppo"], "model.lora.rank"),
    # the megatron backend's own limits (BackendKind.lora_check; more in tests/unit/test_megatron_lora.py)
    (["model.lora.rank=8", "hardware=h100", "model=qwen3-0.6b", "train.backend=megatron", "train.cuda_graphs=true"],
     "train.cuda_graphs"),
    (["model.lora.rank=8", "model=qwen3-30b-a3b", "hardware=h100"], "model.lora.rank"),   # MoE
    (["model.lora.modules_to_save=[model.norm]"], "model.lora.modules_to_save"),          # rank 0: ignored
    (["model.lora.rank=8", "model.lora.modules_to_save=[final_norm]"], "model.lora.modules_to_save"),  # no such module
    (["model.lora.rank=8", "model.lora.modules_to_save=[q_proj]"], "model.lora.modules_to_save"),  # a LoRA target
])
def test_lora_settings_that_cannot_work_are_refused(overrides, key):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    assert key in [p.path for p in e.value.problems]


def test_lora_experiment_validates():
    lo = load(["experiment=tiny-lora-cpu"]).model.lora
    assert lo.rank == 8 and lo.modules_to_save == ["embed_tokens"]
    load(["model.lora.rank=8", "model.lora.modules_to_save=[model.norm,q_norm,lm_head]"])  # every one a module
