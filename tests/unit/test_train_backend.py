"""The torch trainer backend on one rank, in-process (no Ray): packing, micro-batching, save/load,
and the rlrun-model -> transformers-config mapping."""
from __future__ import annotations

import pytest
import torch

from train_fixtures import toy_batch, torch_backend
from rlrun.config import ConfigError, load
from rlrun.train.base import TrainBatch
from rlrun.train.hf_model import hf_config
from rlrun.train.torch_backend import TorchBackend


def _backend(*overrides: str) -> TorchBackend:
    return torch_backend(*overrides)


def _batch() -> TrainBatch:
    return toy_batch()


def test_packed_log_probs_equal_one_sample_at_a_time():
    b, batch = _backend(), _batch()
    packed = b.compute_log_probs(batch)  # all four samples share one row
    for tokens, start, got in zip(batch.tokens, batch.response_start, packed):
        with torch.no_grad():
            logits = b.model(input_ids=tokens[None]).logits[0].float()
        want = torch.log_softmax(logits, -1)[start - 1:-1].gather(-1, tokens[start:, None])[:, 0]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_dynamic_micro_batches_pack_by_token_budget():
    b = _backend("train.max_tokens_per_gpu=24")
    # first-fit, longest first (lengths 9, 12, 7, 15): 15 opens row 0, 12 row 1, 9 fills row 0 (24), 7 joins row 1
    assert b._micro_batches(_batch(), 24) == [[0, 3], [1, 2]]
    # every sample above a 10-token budget trains alone in its micro-batch, longest first (as slime's
    # dp_schedule places one; rlrun validate warns, issue 23): no sample is refused at run time
    assert b._micro_batches(_batch(), 10) == [[3], [1], [0], [2]]


def test_micro_batching_does_not_change_the_update():
    # Adam's first step moves weights by ~lr whatever the gradient's size, so float summation-order
    # differences in near-zero gradients show up at ~1e-3 * lr: tolerance 1e-5 at lr 1e-3 (measured 8e-7).
    one = _backend("train.max_tokens_per_gpu=512", "optim.lr=1e-3")
    many = _backend("train.max_tokens_per_gpu=24", "optim.lr=1e-3")
    m1, m2 = one.train_step(_batch()), many.train_step(_batch())
    assert m1["train/loss"] == pytest.approx(m2["train/loss"], rel=1e-6)
    for (name, p1), p2 in zip(one.model.named_parameters(), many.model.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-5, rtol=0, msg=name)


def test_save_then_load_continues_exactly(tmp_path):
    a = _backend()
    a.train_step(_batch())
    a.save(str(tmp_path / "ck"))
    b = _backend()
    b.load(str(tmp_path / "ck"))
    assert b.step == 1
    ma, mb = a.train_step(_batch()), b.train_step(_batch())  # second step uses restored Adam moments
    assert ma == mb
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)


def test_hf_config_maps_model_fields():
    q = hf_config(load(["model=qwen3-0.6b"]).model)
    assert (type(q).__name__, q.num_hidden_layers, q.hidden_size, q.intermediate_size) == ("Qwen3Config", 28, 1024, 3072)
    assert (q.num_attention_heads, q.num_key_value_heads, q.head_dim, q.vocab_size) == (16, 8, 128, 151936)
    assert q.rope_parameters["rope_theta"] == 1e6 and q.tie_word_embeddings and q.rms_norm_eps == 1e-6
    llama = hf_config(load(["model=llama3.1-8b"]).model)
    assert llama.rope_parameters["rope_type"] == "llama3" and llama.rope_parameters["factor"] == 8.0
    glm = hf_config(load(["model=glm4-9b"]).model)
    assert glm.rope_parameters["partial_rotary_factor"] == 0.5 and glm.attention_bias
    moe = hf_config(load(["model=qwen3-30b-a3b"]).model)
    assert (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size, moe.head_dim) == (128, 8, 768, 128)


def test_deepseek_is_refused_with_the_alternative():
    with pytest.raises(ConfigError, match="does not build family deepseek_v3"):  # validate refuses it first
        load(["model=deepseek-v3"])
    # its transformers config exists all the same: the megatron backend's random init takes its weights from it
    c = hf_config(load(["model=deepseek-v3", "hardware=b200"]).model)
    assert (type(c).__name__, c.q_lora_rank, c.kv_lora_rank, c.n_shared_experts, c.first_k_dense_replace,
            c.rope_parameters["rope_type"]) == ("DeepseekV3Config", 1536, 512, 1, 3, "yarn")


def test_recompute_turns_on_activation_checkpointing_without_changing_the_step():
    plain = _backend("optim.lr=1e-3")
    ckpt = _backend("optim.lr=1e-3", "train.recompute.granularity=full", "train.recompute.method=uniform",
                    "train.recompute.num_layers=1")
    assert ckpt.model.model.gradient_checkpointing and not plain.model.model.gradient_checkpointing
    assert plain.train_step(_batch())["train/grad_norm"] == pytest.approx(ckpt.train_step(_batch())["train/grad_norm"], rel=1e-5)


def test_entropy_term_path_gives_the_same_log_probs_and_entropy():
    # with an entropy term in the loss the backend takes the fused log-prob + entropy function,
    # otherwise the plain log-softmax and the chunked no-grad entropy: same values either way
    b, batch = _backend(), _batch()
    idx = [0, 1, 2, 3]
    lp_fused, ent_fused, _ = b._forward(b.model, batch, idx, entropy_grad=True)
    lp_plain, ent_plain, _ = b._forward(b.model, batch, idx, entropy_grad=False)
    assert ent_fused.requires_grad and not ent_plain.requires_grad
    torch.testing.assert_close(lp_fused, lp_plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_fused, ent_plain, atol=1e-5, rtol=1e-5)


def test_a_blown_up_step_shows_in_param_norm_at_once_and_in_the_gradients_one_step_later():
    """optim.lr=1e30: Adam's first step moves every weight by ~1e30 (its update is ~lr x sign(grad)), so
    the weights' L2 norm passes fp32's 3.4e38 (inf) while that step's loss and grad norm were finite; the
    next step's forward overflows and its gradients are NaN. The nonfinite run invariant reads train/* after
    every step, so it stops on param_norm, the step that did it (tests/integration/test_guard_runner.py)."""
    import math

    b = _backend("optim.lr=1e30")
    first = b.train_step(_batch())
    assert math.isfinite(first["train/loss"]) and math.isfinite(first["train/grad_norm"])
    assert first["train/param_norm"] == math.inf
    second = b.train_step(_batch())
    assert math.isnan(second["train/grad_norm"]) and math.isnan(second["train/param_norm"])
    sane = _backend().train_step(_batch())["train/param_norm"]
    want = math.sqrt(sum(float((p.double() ** 2).sum()) for p in _backend().model.parameters()))
    # one step at the default lr moves the norm by at most lr x sqrt(numel) (Adam); well under 1% here
    assert math.isfinite(sane) and sane == pytest.approx(want, rel=1e-2)
