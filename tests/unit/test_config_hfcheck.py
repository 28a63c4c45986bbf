"""model.* vs the HF checkpoint's config.json, with config.json files written by transformers itself."""
import json

import pytest

from rlrun.config import ConfigError, load


def _write(tmp_path, cfg_obj):
    cfg_obj.save_pretrained(tmp_path)
    return tmp_path


def _qwen3_4b():
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=40960)


def test_matching_checkpoint_passes(tmp_path):
    _write(tmp_path, _qwen3_4b())
    cfg = load(["model=qwen3-4b", "hardware=h100", f"checkpoint.hf={tmp_path}"])
    assert cfg.checkpoint.ref == str(tmp_path)


def test_every_architecture_mismatch_is_reported(tmp_path):
    hf = _qwen3_4b()
    hf.rope_parameters["rope_theta"] = 1e4   # the classic 1e6-vs-1e4 mistake
    hf.tie_word_embeddings = False
    hf.num_key_value_heads = 4
    hf.vocab_size = 151552
    _write(tmp_path, hf)
    with pytest.raises(ConfigError) as e:
        load(["model=qwen3-4b", "hardware=h100", f"checkpoint.hf={tmp_path}"])
    by_path = {p.path: p for p in e.value.problems}
    assert set(by_path) == {"model.rotary_base", "model.tie_word_embeddings", "model.num_query_groups",
                            "model.vocab_size"}
    assert by_path["model.rotary_base"].value == {"config": 1e6, "hf": 1e4}
    assert "model.vocab_size=151552" in by_path["model.vocab_size"].fix


def test_hub_style_config_json_and_other_families(tmp_path):
    # Hub files keep rope_theta top-level and rope_scaling (llama3): both spellings are read.
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "hidden_act": "silu"}))
    load(["model=llama3.1-8b", "hardware=h100", f"checkpoint.hf={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        load(["model=qwen3-8b", "hardware=h100", f"checkpoint.hf={tmp_path}"])
    assert {"model.family", "model.vocab_size", "model.qk_layernorm", "model.rotary_base"} <= set(e.value.paths)


def test_glm4_and_deepseek_from_transformers(tmp_path):
    from transformers import DeepseekV3Config, Glm4Config

    glm = Glm4Config(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                     num_attention_heads=32, num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-5,
                     max_position_embeddings=32768, attention_bias=True)
    _write(tmp_path / "glm", glm)
    load(["model=glm4-9b", "hardware=h100", f"checkpoint.hf={tmp_path / 'glm'}"])
    ds = DeepseekV3Config(max_position_embeddings=163840,
                          rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
    _write(tmp_path / "ds", ds)
    load(["model=deepseek-v3", "hardware=b200", f"checkpoint.hf={tmp_path / 'ds'}"])


def test_dir_without_config_json_is_a_problem_and_missing_dir_a_note(tmp_path):
    with pytest.raises(ConfigError) as e:
        load([f"checkpoint.hf={tmp_path}"])
    assert e.value.paths == ["checkpoint.hf"]
    from rlrun.config.hfcheck import hf_note

    assert "not on this machine" in hf_note(load(["checkpoint.hf=/nonexistent/Qwen3-4B"]))


def test_a_shorter_training_context_than_the_checkpoint_is_valid(tmp_path):
    """model.max_position_embeddings below config.json's (40960) only leaves positions unused: valid (a false
    reject before); above it the positions do not exist in the checkpoint: refused with the bound."""
    _write(tmp_path, _qwen3_4b())
    cfg = load(["model=qwen3-4b", "hardware=h100", f"checkpoint.hf={tmp_path}", "model.max_position_embeddings=16384"])
    assert cfg.model.max_position_embeddings == 16384 and cfg.rollout.context_length == 16384
    with pytest.raises(ConfigError) as e:
        load(["model=qwen3-4b", "hardware=h100", f"checkpoint.hf={tmp_path}", "model.max_position_embeddings=65536"])
    (p,) = [p for p in e.value.problems if p.path == "model.max_position_embeddings"]
    assert p.value == {"config": 65536, "hf": 40960} and "at most 40960" in p.message
