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


def _hub_cache(root, repo_id, cfg_obj):
    """The Hugging Face cache layout (models--org--name/refs/main -> snapshots/<commit>/) with a config.json
    written by transformers."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    cfg_obj.save_pretrained(snap)
    return snap


def test_a_released_model_means_its_weights_from_the_local_hf_cache(tmp_path, monkeypatch):
    """model=qwen3-4b: checkpoint.hf is Qwen/Qwen3-4B's cached snapshot (and its config.json is checked against
    model.*); not cached: the hub id, which the preflight refuses with the download command; random init only
    with checkpoint.random_init=true."""
    from rlrun.launch.preflight import checkpoints

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "hub").mkdir()
    base = ["model=qwen3-4b", "algo=grpo", "hardware=mi300x"]
    cfg = load(base)
    assert cfg.model.hub_id == "Qwen/Qwen3-4B" and cfg.checkpoint.hf == "Qwen/Qwen3-4B"
    (p,) = list(checkpoints(cfg, None))
    assert p.path == "checkpoint.hf" and "not in the local Hugging Face cache" in p.message
    assert "hf download Qwen/Qwen3-4B" in p.fix and "checkpoint.random_init=true" in p.fix
    snap = _hub_cache(tmp_path / "hub", "Qwen/Qwen3-4B", _qwen3_4b())
    cfg = load(base)
    assert cfg.checkpoint.hf == str(snap) == cfg.checkpoint.ref
    assert load([*base, "checkpoint.random_init=true"]).checkpoint.hf is None
    assert load([]).checkpoint.hf is None and load([]).model.hub_id is None  # the tiny default: random init
    hf = _qwen3_4b()
    hf.vocab_size = 151552
    (tmp_path / "hub" / "models--Qwen--Qwen3-4B").rename(tmp_path / "old")
    _hub_cache(tmp_path / "hub", "Qwen/Qwen3-4B", hf)
    with pytest.raises(ConfigError) as e:  # the cached weights are checked like any checkpoint.hf
        load(base)
    assert [p.path for p in e.value.problems] == ["model.vocab_size"]
    with pytest.raises(ConfigError) as e:
        load([*base, "checkpoint.random_init=true", "checkpoint.hf=/x"])
    assert [p.path for p in e.value.problems] == ["checkpoint.random_init"]


def test_real_weights_on_the_toy_task_are_said_plainly(tmp_path, monkeypatch):
    from rlrun.config.warn import check

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    ov = ["model=qwen3-4b", "algo=grpo", "hardware=mi300x"]
    (w,) = [p for p in check(load(ov), ov) if p.path == "data.prompt_data"]
    assert "trains Qwen/Qwen3-4B on rlrun's toy task" in w.message and "data=dapo-math-17k" in w.fix
    assert not [p for p in check(load([]), []) if p.path == "data.prompt_data"]  # the tiny default job: no word


def test_the_printed_download_command_exists_and_downloads_into_the_cache_rlrun_reads(tmp_path, monkeypatch):
    """The fix names a command of the installed huggingface_hub (`hf download`; `huggingface-cli` is gone since
    huggingface_hub 1.0), and that command accepts the arguments printed (its --help parses them offline)."""
    import re
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from rlrun.launch.preflight import checkpoints

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (p,) = list(checkpoints(load(["model=qwen3-4b", "algo=grpo", "hardware=mi300x"]), None))
    (command,) = re.findall(r"`([^`]+)`", p.fix)
    argv = shlex.split(command)
    assert argv == ["hf", "download", "Qwen/Qwen3-4B"]
    prog = Path(sys.executable).parent / argv[0]
    assert prog.is_file(), f"{argv[0]} is not installed next to {sys.executable}"
    done = subprocess.run([str(prog), *argv[1:], "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--local-dir" in done.stdout, done.stderr
