"""Model families beyond Qwen3/Llama/GLM4 (rlrun.config.families): the profiles match the published
config.json files key for key (no spurious problem for a key the family's file simply lacks), the
hard-wired architecture and the backends that build a family are config rules, and the registry agrees
with the trainer backends' own tables."""
import json
from pathlib import Path

import pytest

from rlrun.config import ConfigError, load
from rlrun.config.families import FAMILIES

# The hub files as published (huggingface.co/<repo>/blob/main/config.json: Qwen/Qwen2.5-7B-Instruct,
# mistralai/Mistral-7B-v0.3, microsoft/Phi-3-mini-4k-instruct), trimmed of keys rlrun does not map
# (token ids, dtype, initializer_range, transformers_version, use_cache); the catalogue's valid
# controls use the same files.
HF_DIR = Path(__file__).parent / "invalid_configs" / "hf"
HUB = {d.name: json.loads((d / "config.json").read_text()) for d in sorted(HF_DIR.iterdir())}


def _hub(tmp_path, name, **changes):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**HUB[name], **changes}))
    return d


@pytest.mark.parametrize("name", sorted(HUB))
def test_profile_matches_its_published_config_json(tmp_path, name):
    cfg = load([f"model={name}", "hardware=h100", f"checkpoint.hf={_hub(tmp_path, name)}"])
    assert cfg.model.family == {"qwen2.5-7b": "qwen2", "mistral-7b": "mistral", "phi-3-mini": "phi3"}[name]


def test_a_real_mismatch_is_still_found(tmp_path):
    with pytest.raises(ConfigError) as err:  # Mistral v0.1's values against the v0.3 profile
        load(["model=mistral-7b", "hardware=h100",
              f"checkpoint.hf={_hub(tmp_path, 'mistral-7b', vocab_size=32000, rope_theta=10000.0)}"])
    assert set(err.value.paths) == {"model.vocab_size", "model.rotary_base"}, err.value.render()


def test_sliding_window_shorter_than_the_context_is_refused_on_megatron(tmp_path):
    hf = _hub(tmp_path, "mistral-7b", sliding_window=4096)  # v0.1's window
    with pytest.raises(ConfigError) as err:
        load(["model=mistral-7b", "hardware=h100", f"checkpoint.hf={hf}"])
    assert err.value.paths == ["checkpoint.hf"], err.value.render()
    load(["model=mistral-7b", "hardware=h100", f"checkpoint.hf={hf}", "rollout.context_length=4096",
          "rollout.max_response_len=3072"])


def test_hardwired_architecture_and_backends_are_rules():
    with pytest.raises(ConfigError) as err:
        load(["model=qwen2.5-7b", "hardware=h100", "model.add_qkv_bias=false"])
    assert err.value.paths == ["model.add_qkv_bias"]
    with pytest.raises(ConfigError) as err:
        load(["model=phi-3-mini", "hardware=h100", "train.backend=megatron"])
    assert err.value.paths == ["train.backend"] and "train.backend=torch" in err.value.problems[0].fix


def test_registry_agrees_with_the_backends():
    from rlrun.train import hf_model
    from rlrun.train.megatron import model as megatron_model

    for name, fam in FAMILIES.items():
        # the torch backend builds a family from its transformers config; the megatron backend's random init takes
        # its weights from the same config (deepseek_v3: only megatron trains it, validate refuses torch)
        assert ("torch" in fam.backends) <= (name in hf_model._FAMILIES), name
        assert (fam.hf_config is not None) == (name in hf_model._FAMILIES), name
        assert ("megatron" in fam.backends) == (name in megatron_model._INTERLEAVED_ROPE), name


@pytest.mark.parametrize("name", sorted(HUB))
def test_the_torch_backend_builds_the_family(name):
    import torch

    from rlrun.train.hf_model import build_causal_lm, hf_config

    heads = {"qwen2.5-7b": (4, 2), "mistral-7b": (4, 2), "phi-3-mini": (4, 4)}[name]
    m = load([f"model={name}", "model.num_layers=2", "model.hidden_size=32", "model.ffn_hidden_size=64",
              f"model.num_attention_heads={heads[0]}", f"model.num_query_groups={heads[1]}", "model.head_dim=8",
              ]).model  # the real vocab: Phi-3's config pads with token 32000
    vocab = m.vocab_size
    lm = build_causal_lm(m, None, seed=0)
    assert type(lm).__name__ == hf_config(m).architectures[0]
    names = dict(lm.named_parameters())
    if m.add_qkv_bias:  # Qwen2: the bias the family hard-wires is there
        assert "model.layers.0.self_attn.q_proj.bias" in names
    assert not any("q_norm" in n for n in names)  # no qk-norm in these families
    assert lm(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, vocab)
