"""slime interop: the flag codec, export, import and round trips on the seed recipe (slime's
scripts/run-qwen3-4B-amd.sh), a disaggregated H100 variant and a script written the way the seed tutorial shows."""

import io
from pathlib import Path

import pytest

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.interop.bash_script import read_script
from rlrun.interop.slime import cli_main
from rlrun.interop.slime_decode import decode, flag_set, parse_args
from rlrun.interop.slime_encode import encode
from rlrun.interop.slime_export import render_script
from rlrun.interop.slime_import import import_script
from rlrun.interop.slime_table import NO_FLAG, ROWS, SPECIAL

DATA = Path(__file__).resolve().parents[1] / "data" / "slime"
SEED = DATA / "run-qwen3-4B-mi300x.sh"
DISAGG = DATA / "run-glm4-9B-h100-disagg.sh"
TUTORIAL = DATA / "run-qwen3-4B-tutorial.sh"
# What an export may add to a script's flags: facts rlrun knows that slime's scripts leave to Megatron.
EXPORT_EXTRAS = {"--max-position-embeddings"}


def script_flags(path: Path) -> set:
    launch = read_script(path).launch
    return flag_set(launch.args, launch.entry)


def exported_flags(text: str, tmp_path: Path) -> set:
    out = tmp_path / "exported.sh"
    out.write_text(text)
    return script_flags(out)


def args(text: str) -> list[str]:
    return text.split()


# ---- codec -----------------------------------------------------------------------------------------
def test_decode_seed_values_are_slimes():
    launch = read_script(SEED).launch
    d = decode(parse_args(launch.args))
    v = d.values
    assert d.unknown == []
    assert (v["rollout.temperature"], v["eval.top_p"], v["eval.temperature"]) == (1.0, 1.0, 1.0)
    assert (v["train.global_batch_size"], v["train.num_steps_per_rollout"]) == (256, 1)  # 32*8 = 256*1
    assert (v["train.offload"], v["rollout.offload"], v["train.gradient_accumulation_fusion"]) == (False, False, False)
    assert v["rollout.num_gpus"] == 8  # colocated: slime sets rollout GPUs = actor GPUs
    assert (v["algo.eps_clip_high"], v["algo.kl_loss_type"], v["algo.use_kl_loss"]) == (0.28, "low_var_kl", True)
    assert (v["model.num_query_groups"], v["model.rotary_base"], v["model.tie_word_embeddings"]) == (8, 1e6, True)
    assert v["model.moe"] is None and v["model.mla"] is None
    assert v["eval.datasets"] == [{"name": "aime", "path": "/root/aime-2024/aime-2024.jsonl"}]


def test_absent_flags_take_slime_and_megatron_defaults():
    v = decode(parse_args(args("--rollout-batch-size 4 --n-samples-per-prompt 2 --global-batch-size 4 "
                               "--rollout-max-response-len 16 --num-rollout 1 --actor-num-gpus-per-node 2"))).values
    assert v["train.num_steps_per_rollout"] == 2  # 4 prompts * 2 samples / gbs 4
    assert (v["algo.kl_loss_type"], v["optim.lr_decay_style"]) == ("k1", "linear")
    assert (v["optim.adam_beta2"], v["optim.weight_decay"], v["optim.lr"]) == (0.999, 0.01, 1e-6)
    assert (v["train.colocate"], v["train.offload"], v["rollout.num_gpus"]) == (False, False, None)
    assert (v["logging.wandb.mode"], v["rollout.over_sampling_batch_size"]) == ("disabled", 4)
    assert "model.num_layers" not in v  # no MODEL_ARGS: the model group decides


def test_colocate_without_no_offload_means_offload_on():
    v = decode(parse_args(args("--colocate --actor-num-gpus-per-node 4 --rollout-batch-size 2"))).values
    assert (v["train.offload"], v["rollout.offload"], v["rollout.num_gpus"]) == (True, True, 4)


def test_unknown_typo_abbreviation_secret_and_changed_constant_are_reported():
    d = decode(parse_args(args("--rollout-batch-size 2 --rollout-temprature 0.5 --rollout-max-resp 9 "
                               "--wandb-key s3cret --attention-dropout 0.1 --allgather-cp")))
    why = {o.flag: w for o, w in d.unknown}
    assert "did you mean --rollout-temperature" in why["--rollout-temprature"]
    assert "--rollout-max-response-len" in why["--rollout-max-resp"]
    assert "credential" in why["--wandb-key"]
    assert "--attention-dropout 0.0" in why["--attention-dropout"]
    assert why["--allgather-cp"].startswith("slime feature rlrun lacks: all-gather context parallelism")
    assert d.values["rollout.temperature"] == 1.0  # the typo did not set it: slime's default holds


@pytest.mark.parametrize("freq, first_k", [("[0]*3+[1]*58", 3), ("[0, 0, 1, 1]", 2), ("1", 0)])
def test_moe_layer_freq(freq, first_k):
    v = decode(parse_args(["--num-layers", "4", "--num-experts", "8", "--moe-layer-freq", freq])).values
    assert v["model.moe.first_k_dense"] == first_k


def test_moe_layer_freq_spellings_compare_equal_in_round_trips():
    base = ["--num-layers", "4", "--num-experts", "8", "--moe-layer-freq"]
    assert flag_set(base + ["[0]*2+[1]*2"]) == flag_set(base + ["[0, 0, 1, 1]"])
    assert flag_set(base + ["[0]*0+[1]*4"]) == flag_set(base[:-1])


def test_values_the_script_computes_at_run_time_are_reported_not_imported():
    d = decode(parse_args(["--num-layers", "4", "--num-experts", "8", "--moe-layer-freq", "${MOE_LAYER_FREQ}",
                           "--sglang-cuda-graph-bs", "1", "2", "$(seq 16 8 256)"]))
    assert [o.flag for o, _ in d.unknown] == ["--moe-layer-freq", "--sglang-cuda-graph-bs"]
    assert all("computed when the script runs" in why for _, why in d.unknown)
    # the layer pattern is unknown, so the model group keeps its own (not a made-up 0)
    assert "rollout.sglang" not in d.values and "model.moe.first_k_dense" not in d.values


def test_megatron_derives_kv_channels_when_absent():
    v = decode(parse_args(args("--num-layers 2 --hidden-size 4096 --num-attention-heads 32"))).values
    assert v["model.head_dim"] == 128


def test_every_config_leaf_is_mapped_special_or_listed():
    covered = {r.path for r in ROWS} | set(SPECIAL) | set(NO_FLAG)
    for overrides in ([], ["model=qwen3-30b-a3b"], ["model=deepseek-v3", "hardware=b200"]):
        cfg = load(overrides).model_dump(mode="python")
        missing = [p for p in _leaves(cfg) if not any(p == c or p.startswith(c + ".") for c in covered)]
        assert missing == [], f"add these to slime_table.py (ROWS, SPECIAL or NO_FLAG): {missing}"


def _leaves(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        p = prefix + k
        out.extend(_leaves(v, p + ".") if isinstance(v, dict) and v else [p])
    return out


def test_encode_moe_mla_and_family_flags():
    enc = encode(load(["model=deepseek-v3", "hardware=b200"]).model_dump(mode="python"))
    model = [" ".join(t) for t in enc.arrays["MODEL_ARGS"]]
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-pos-emb-head-dim 64",
                 "--num-experts 256", "--moe-router-topk 8", "--moe-layer-freq [0]*3+[1]*58",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-router-score-function sigmoid",
                 "--moe-router-num-groups 8", "--moe-router-group-topk 4", "--rotary-scaling-factor 40.0",
                 "--untie-embeddings-and-output-weights"):
        assert flag in model
    assert "--group-query-attention" not in model  # MLA has no KV groups
    assert ["--attention-backend", "flash"] not in enc.arrays["MISC_ARGS"]  # not for MLA
    glm = [" ".join(t) for t in encode(load(["model=glm4-9b"]).model_dump(mode="python")).arrays["MODEL_ARGS"]]
    assert glm[0] == "--spec slime_plugins.models.glm4 get_glm_spec"
    assert {"--post-self-attn-layernorm", "--rotary-interleaved", "--add-qkv-bias", "--rotary-percent 0.5"} <= set(glm)


# ---- import ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def imported():
    return {p.name: import_script(p) for p in (SEED, DISAGG, TUTORIAL)}


def test_import_seed_picks_groups_and_overrides_only_differences(imported):
    r = imported[SEED.name]
    assert r.problems == []
    assert {g: c.option for g, c in r.choices.items()} == {
        "model": "qwen3-4b", "algo": "grpo", "hardware": "mi300x", "parallelism": "tp2", "data": "dapo-math-17k"}
    o = r.overrides
    assert o["algo.eps_clip_high"] == 0.28
    assert o["eval.datasets"] == [{"name": "aime", "path": "/root/aime-2024/aime-2024.jsonl", "rm_type": "deepscaler"}]
    # equal to what the groups give or rlrun derives: left out
    for path in ("model.num_layers", "parallelism.tp", "train.offload", "rollout.offload", "rollout.temperature",
                 "train.gradient_accumulation_fusion", "rollout.num_gpus", "eval.temperature", "eval.top_p",
                 "data.rm_type"):
        assert path not in o
    # the flag the script sets is carried; the side rlrun derives from it is null (a problem names the flag)
    assert (o["train.global_batch_size"], o["train.num_steps_per_rollout"]) == (256, None)
    # the flags the script leaves out take slime's defaults, which are rlrun's base values: nothing to fill in
    assert r.unknown == [] and r.filled == {}
    for path in ("rollout.max_concurrency", "rollout.request_timeout_s", "rollout.router.request_timeout_s"):
        assert path not in o
    assert r.yaml_text.startswith("# @package _global_\n")
    assert "  - override /model: qwen3-4b\n" in r.yaml_text


def test_import_disaggregated_h100_plans_4_plus_4(imported, tmp_path):
    r = imported[DISAGG.name]
    assert r.problems == [] and r.choices["hardware"].option == "h100" and r.choices["model"].option == "glm4-9b"
    assert (r.overrides["train.colocate"], r.overrides["rollout.num_gpus"]) == (False, 4)
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "disagg.yaml").write_text(r.yaml_text)
    plan = make_plan(load(["experiment=disagg"], config_dir=tmp_path))
    assert (plan.trainer_gpus, plan.rollout_gpus, plan.num_engines, plan.gpus_per_engine) == (4, 4, 2, 2)
    assert (plan.tp, plan.cp, plan.dp, plan.global_batch_size) == (2, 2, 1, 128)
    assert sorted(s.gpu for s in plan.placement if s.role == "engine") == [4, 5, 6, 7]


@pytest.mark.parametrize("script", [SEED, DISAGG, TUTORIAL], ids=lambda p: p.stem)
def test_round_trip_import_then_export_loses_no_flag(imported, script, tmp_path):
    r = imported[script.name]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "rt.yaml").write_text(r.yaml_text)
    text = render_script(load(["experiment=rt"], config_dir=tmp_path).model_dump(mode="python"))
    before, after = script_flags(script), exported_flags(text, tmp_path)
    assert before - after == set()
    assert {f for f, _ in after - before} <= EXPORT_EXTRAS


def test_export_of_shipped_seed_experiment_covers_the_seed_script(tmp_path):
    text = render_script(load(["experiment=qwen3-4b-grpo-mi300x"]).model_dump(mode="python"))
    assert "export RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES=1\n" in text
    assert "   -- python3 train.py \\\n" in text and "   ${MISC_ARGS[@]}\n" in text
    before, after = script_flags(SEED), exported_flags(text, tmp_path)
    assert before - after == set()
    # rlrun's own defaults where the experiment does not follow slime's: listed, so a change is noticed
    assert {f for f, _ in after - before} == EXPORT_EXTRAS | {"--use-wandb", "--wandb-mode", "--wandb-project"}


def test_new_user_tutorial_script_imports_plans_and_exports_back(tmp_path):
    """As a new user would: `rlrun import slime`, then `rlrun plan`, then `rlrun export slime`."""
    conf = tmp_path / "conf"
    out, err = io.StringIO(), io.StringIO()
    target = conf / "experiment" / "my-first-rl.yaml"
    rc = cli_main(["import", "slime", str(TUTORIAL), "--out", str(target)], out, err)
    assert rc == 0, err.getvalue()
    assert "experiment my-first-rl:" in err.getvalue() and "model=qwen3-4b" in err.getvalue()
    cfg = load(["experiment=my-first-rl"], config_dir=conf)
    plan = make_plan(cfg)
    assert (plan.world_size, plan.num_engines, plan.total_steps) == (8, 4, 200)
    out = io.StringIO()
    assert cli_main(["export", "slime", "--config-dir", str(conf), "experiment=my-first-rl"], out, err) == 0
    before, after = script_flags(TUTORIAL), exported_flags(out.getvalue(), tmp_path)
    assert before - after == set()
    assert "--num-rollout" in out.getvalue() and "--rollout-temperature 0.8" in out.getvalue()


def test_import_reports_unknown_flags_in_yaml_and_never_copies_secrets(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(SEED.read_text().replace("--rollout-temperature 1\n",
                                               "--rollout-temprature 0.8 --wandb-key s3cret --allgather-cp\n"))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "qwen3-4B.sh").write_text((DATA / "models" / "qwen3-4B.sh").read_text())
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "conf" / "experiment" / "x.yaml"
    assert cli_main(["import", "slime", str(script), "--out", str(target)], out, err) == 2
    assert not target.exists() and "nothing written" in err.getvalue() and "--allow-unknown" in err.getvalue()
    assert "--rollout-temprature, --allgather-cp" in err.getvalue()  # not the secret: it is dropped on purpose
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["import", "slime", str(script), "--allow-unknown"], out, err) == 0
    yaml_text = out.getvalue()
    assert "s3cret" not in yaml_text and "s3cret" not in err.getvalue()
    assert "#   --rollout-temprature 0.8  [run.sh:" in yaml_text
    assert "did you mean --rollout-temperature" in err.getvalue()
    assert "--allgather-cp" in yaml_text
    assert "temperature: 0.8" not in yaml_text  # the typo set nothing, as in slime


def test_cli_usage_and_missing_script(tmp_path):
    err = io.StringIO()
    assert cli_main(["export"], io.StringIO(), err) == 2 and "rlrun export slime" in err.getvalue()
    err = io.StringIO()
    assert cli_main(["import", "slime", str(tmp_path / "none.sh")], io.StringIO(), err) == 2
    assert "no such file" in err.getvalue()


def test_export_invalid_config_exits_1_with_problems():
    err = io.StringIO()
    assert cli_main(["export", "slime", "rollout.temperature=0"], io.StringIO(), err) == 1
    assert "rollout.temperature" in err.getvalue()


def test_docs_mapping_table_is_generated_from_the_table():
    from rlrun.interop.slime_docs import BEGIN, END, mapping_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "slime.md").read_text()
    start, end = page.index(BEGIN), page.index(END) + len(END)
    assert page[start:end] + "\n" == mapping_markdown(), \
        "docs/slime.md is stale: regenerate its table with `python -m rlrun.interop.slime_docs`"


def test_rlrun_cli_dispatches_export_and_import(tmp_path, capsys):
    from rlrun.cli import main

    assert main(["export", "slime", "experiment=qwen3-4b-grpo-mi300x"]) == 0
    assert "--rollout-temperature 1.0" in capsys.readouterr().out
    assert main(["import", "slime", str(SEED), "--out", str(tmp_path / "experiment" / "seed.yaml")]) == 0
    assert (tmp_path / "experiment" / "seed.yaml").read_text().startswith("# @package _global_")
    # interop's own options reach it through the rlrun CLI (they are not rlrun options)
    named = tmp_path / "experiment" / "named.yaml"
    capsys.readouterr()
    assert main(["import", "slime", str(SEED), "--name", "named", "--out", str(named)]) == 0
    assert "experiment named" in capsys.readouterr().err


def test_import_env_option_supplies_variables_the_script_expects(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(SEED.read_text().replace("${MODEL_DIR}/Qwen3-4B\n", "${BASE_DIR}/Qwen3-4B\n"))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "qwen3-4B.sh").write_text((DATA / "models" / "qwen3-4B.sh").read_text())
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["import", "slime", str(script), "--env", "BASE_DIR=/data"], out, err) == 0
    assert "  hf: /data/Qwen3-4B\n" in out.getvalue()
    err = io.StringIO()
    assert cli_main(["import", "slime", str(script), "--env", "BASE_DIR"], io.StringIO(), err) == 2
    assert "NAME=VALUE" in err.getvalue()


def test_sglang_flags_resolve_against_the_pinned_server_args():
    d = decode(parse_args(args("--rollout-batch-size 2 --sglang-mem-frac 0.6 --sglang-cuda-graph-bs 1 2 4 "
                               "--sglang-enable-dp-attention --sglang-context-length 4096 --sglang-no-such-flag 1 "
                               "--sglang-router-ip 10.0.0.1")))
    v = d.values
    assert v["rollout.mem_fraction_static"] == 0.6 and v["rollout.context_length"] == 4096
    assert v["rollout.sglang"] == {"cuda_graph_bs": [1, 2, 4], "enable_dp_attention": True}
    assert any("--sglang-mem-fraction-static" in n for n in d.notes)  # the abbreviation is named
    why = {o.flag: w for o, w in d.unknown}
    assert set(why) == {"--sglang-no-such-flag", "--sglang-router-ip"}
    assert "ServerArgs" in why["--sglang-no-such-flag"]
    # the abbreviation and its full spelling are the same flag in a round-trip comparison
    assert flag_set(args("--rollout-batch-size 2 --sglang-mem-frac 0.6")) == \
        flag_set(args("--rollout-batch-size 2 --sglang-mem-fraction-static 0.6"))


def test_export_and_import_load_neither_torch_nor_ray():
    import subprocess
    import sys

    code = ("import io, sys\nfrom rlrun.interop.slime import cli_main\n"
            "cli_main(['export', 'slime', 'experiment=qwen3-4b-grpo-mi300x'], io.StringIO(), io.StringIO())\n"
            f"cli_main(['import', 'slime', {str(SEED)!r}], io.StringIO(), io.StringIO())\n"
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_import_with_an_unknown_forced_group_exits_2_with_choices():
    err = io.StringIO()
    assert cli_main(["import", "slime", str(SEED), "--model", "qwen3-5b"], io.StringIO(), err) == 2
    assert "qwen3-5b" in err.getvalue()


QWEN3_30B_A3B = """MODEL_ARGS=(
   --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144
   --num-attention-heads 32 --group-query-attention --num-query-groups 4 --kv-channels 128
   --vocab-size 151936 --rotary-base 1000000 --norm-epsilon 1e-6 --normalization RMSNorm
   --position-embedding-type rope --disable-bias-linear --qk-layernorm --swiglu
   --untie-embeddings-and-output-weights
   --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-router-score-function softmax
   --moe-layer-freq "[0]*0+[1]*48"
   --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-dtype fp32 --moe-permute-fusion
   --moe-aux-loss-coeff 0
)
"""


def test_moe_script_picks_the_moe_model_and_layout_and_round_trips(tmp_path):
    """A Qwen3-30B-A3B variant of the seed script on 8x H100 (TP 4, EP 8): MoE values match the group."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "qwen3-30B-A3B.sh").write_text(QWEN3_30B_A3B)
    script = tmp_path / "run-moe.sh"
    text = SEED.read_text().replace("models/qwen3-4B.sh", "models/qwen3-30B-A3B.sh")
    text = text.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 4")
    text = text.replace("--expert-model-parallel-size 1", "--expert-model-parallel-size 8")
    script.write_text(text.replace('export HIP_VISIBLE_DEVICES=${HIP_VISIBLE_DEVICES:-"0,1,2,3,4,5,6,7"}\n', "")
                      .replace("export RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES=${RAY_EXPERIMENTAL_NOSET_HIP"
                               "_VISIBLE_DEVICES:-\"1\"}\n", ""))
    r = import_script(script, name="moe")
    assert {g: c.option for g, c in r.choices.items()} == {
        "model": "qwen3-30b-a3b", "algo": "grpo", "hardware": "h100", "parallelism": "tp4_ep8",
        "data": "dapo-math-17k"}
    assert r.problems == [] and r.unknown == []
    assert not [p for p in r.overrides if p.startswith(("model.", "parallelism."))]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "moe.yaml").write_text(r.yaml_text)
    exported = render_script(load(["experiment=moe"], config_dir=tmp_path).model_dump(mode="python"))
    before, after = script_flags(script), exported_flags(exported, tmp_path)
    assert before - after == set()  # `--moe-layer-freq [0]*0+[1]*48` is "every layer MoE", the default


def test_weight_sync_bucket_is_mb_in_rlrun_and_bytes_in_slime(tmp_path):
    """rollout.weight_sync_bucket_mb <-> --update-weight-buffer-size (bytes, slime default 512 MB)."""
    flags = [f for a in encode(load([]).model_dump(mode="python")).arrays.values() for f in a]
    assert not [f for f in flags if f[0] == "--update-weight-buffer-size"]  # 512 = slime's default: left out
    cfg = load(["rollout.weight_sync_bucket_mb=2048"]).model_dump(mode="python")
    flags = [f for a in encode(cfg).arrays.values() for f in a]
    assert ["--update-weight-buffer-size", str(2048 << 20)] in flags
    assert decode(parse_args(["--update-weight-buffer-size", "2147483648"])).values[
        "rollout.weight_sync_bucket_mb"] == 2048
    assert decode(parse_args([])).values["rollout.weight_sync_bucket_mb"] == 512  # absent: slime's 512 MB
    (bad,) = decode(parse_args(["--update-weight-buffer-size", "1000"])).unknown  # reported, not imported
    assert "whole multiple of 1048576" in bad[1]
    # and through a whole script: import then export keeps the flag
    script = tmp_path / "run.sh"
    script.write_text(SEED.read_text().replace(
        "MISC_ARGS=(", "MISC_ARGS=(\n   --update-weight-buffer-size 1073741824", 1))
    r = import_script(script)
    assert r.overrides["rollout.weight_sync_bucket_mb"] == 1024
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "rt.yaml").write_text(r.yaml_text)
    text = render_script(load(["experiment=rt"], config_dir=tmp_path).model_dump(mode="python"))
    assert "--update-weight-buffer-size 1073741824" in text
    before, after = script_flags(script), exported_flags(text, tmp_path)
    assert ("--update-weight-buffer-size", (1024.0,)) in before & after  # round-trip sets compare in rlrun units


def test_bf16_adam_moments_export_megatrons_three_flags_and_import_back():
    cfg = load(["hardware=h100", "train.backend=megatron", "optim.state_dtype=bf16"]).model_dump()
    opt = encode(cfg).arrays["OPTIMIZER_ARGS"]
    assert ["--exp-avg-dtype", "bf16"] in opt and ["--exp-avg-sq-dtype", "bf16"] in opt
    assert ["--use-precision-aware-optimizer"] in opt
    d = decode(parse_args([x for flag in opt for x in flag]))
    assert d.unknown == [] and d.values["optim.state_dtype"] == "bf16"
    fp32 = encode(load(["hardware=h100", "train.backend=megatron"]).model_dump()).arrays["OPTIMIZER_ARGS"]
    assert not any(f[0] in ("--exp-avg-dtype", "--use-precision-aware-optimizer") for f in fp32)  # slime's default
    assert decode(parse_args(["--lr", "1e-6"])).values["optim.state_dtype"] == "fp32"


# ---- absent flags and slime's/Megatron's own overrides (hand-computed values) ----------------------------
def test_absent_global_batch_size_is_megatrons_micro_batch_times_dp():
    base = "--rollout-batch-size 32 --n-samples-per-prompt 8 --actor-num-gpus-per-node 8 --tensor-model-parallel-size 2"
    v = decode(parse_args(args(base + " --micro-batch-size 2"))).values
    # Megatron: gbs = micro_batch_size 2 * DP (8 GPUs / TP 2 = 4) = 8; slime splits 256 samples into 256 // 8 steps
    assert (v["train.global_batch_size"], v["train.num_steps_per_rollout"]) == (8, 32)
    v = decode(parse_args(args(base + " --num-steps-per-rollout 4"))).values
    assert v["train.global_batch_size"] == 64  # slime_validate_args: 32 * 8 // 4
    assert decode(parse_args(args(base + " --use-dynamic-batch-size"))).values["train.max_tokens_per_gpu"] is None


def test_megatron_and_slime_overrides_are_applied_and_said():
    d = decode(parse_args(args("--num-layers 2 --hidden-size 64 --num-attention-heads 8 --num-query-groups 2 "
                               "--tensor-model-parallel-size 1 --sequence-parallel --num-epoch 3 --num-rollout 5 "
                               "--load /ck/ --save /ck --rollout-batch-size 2")))
    v = d.values
    assert (v["model.num_query_groups"], v["parallelism.sequence_parallel"]) == (8, False)
    assert (v["run.resume"], v["checkpoint.load"], v["checkpoint.save"]) == ("auto", None, "/ck")
    notes = " | ".join(d.notes)
    for said in ("without --group-query-attention: Megatron builds multi-head attention (8 KV groups)",
                 "--sequence-parallel at tensor-parallel size 1", "slime ignores --num-epoch",
                 "--load /ck/ is the --save folder"):
        assert said in notes
    with_gqa = decode(parse_args(args("--num-layers 2 --num-attention-heads 8 --group-query-attention "
                                      "--num-query-groups 2 --load /a --save /b"))).values
    assert (with_gqa["model.num_query_groups"], with_gqa["checkpoint.load"]) == (2, "/a")
    assert "run.resume" not in with_gqa


@pytest.mark.parametrize("values, nodes", [
    ({"train.num_nodes": 16, "train.gpus_per_node": 8, "train.colocate": True, "rollout.num_gpus": 128}, 16),
    # 8 trainer + 12 rollout GPUs packed on nodes of 8: ceil(20 / 8) = 3
    ({"train.num_nodes": 1, "train.gpus_per_node": 8, "train.colocate": False, "rollout.num_gpus": 12}, 3),
    ({"train.num_nodes": 2, "train.gpus_per_node": 4, "train.colocate": False, "rollout.num_gpus": 0}, 2),
])
def test_cluster_nodes_from_the_launch_flags(values, nodes):
    from rlrun.interop.slime_import import cluster_nodes

    assert cluster_nodes({"hardware.gpus_per_node": 8, **values}) == nodes


def test_export_writes_load_for_resume_auto():
    enc = encode(load(["experiment=qwen3-4b-grpo-mi300x", "run.resume=auto", "checkpoint.load=null",
                       "checkpoint.save=/ck"]).model_dump(mode="python"))
    assert ["--load", "/ck"] in enc.arrays["CKPT_ARGS"]


def test_icepop_and_opsm_export_slimes_flags_and_import_back():
    over = ["algo.use_tis=true", "algo.tis_mode=mask", "algo.tis_clip_low=0.5", "algo.use_opsm=true",
            "algo.opsm_delta=0.001"]
    grpo = encode(load(over).model_dump()).arrays["GRPO_ARGS"]
    assert ["--custom-tis-function-path", "slime.backends.megatron_utils.loss.icepop_function"] in grpo
    assert ["--use-opsm"] in grpo and ["--opsm-delta", "0.001"] in grpo
    d = decode(parse_args([x for flag in grpo for x in flag]))
    assert d.unknown == []
    assert (d.values["algo.tis_mode"], d.values["algo.use_opsm"], d.values["algo.opsm_delta"]) == ("mask", True, 1e-3)
    # a level slime has no flag for becomes a comment; another custom TIS function is reported, not imported
    seq = encode(load(["algo.use_tis=true", "algo.tis_level=sequence"]).model_dump())
    assert not any(f[0] == "--custom-tis-function-path" for f in seq.arrays["GRPO_ARGS"])
    assert any("algo.tis_level=sequence" in c for c in seq.comments["GRPO_ARGS"])
    other = decode(parse_args(["--custom-tis-function-path", "my.mis:weights"]))
    assert other.values["algo.tis_mode"] == "truncate" and len(other.unknown) == 1


def test_async_training_round_trips_through_train_async_py(tmp_path):
    """train.async_train <-> train_async.py; the async and partial-rollout keys <-> slime's flags."""
    keys = ["train.async_train=true", "train.colocate=false", "rollout.num_gpus=1", "rollout.async_buffer_size=3",
            "rollout.update_weights_interval=2", "rollout.partial_rollout=true",
            "rollout.mask_offpolicy_in_partial_rollout=true"]
    text = render_script(load(keys).model_dump(mode="python"))
    assert "train_async.py" in text
    for flag in ("--async-buffer-size 3", "--update-weights-interval 2", "--partial-rollout",
                 "--mask-offpolicy-in-partial-rollout"):
        assert flag in text, flag
    script = tmp_path / "run.sh"
    script.write_text(text)
    r = import_script(script, name="rt")
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "rt.yaml").write_text(r.yaml_text)
    back = load(["experiment=rt"], config_dir=tmp_path)
    assert back.train.async_train and not back.train.colocate
    assert (back.rollout.async_buffer_size, back.rollout.update_weights_interval) == (3, 2)
    assert back.rollout.partial_rollout and back.rollout.mask_offpolicy_in_partial_rollout


def test_import_reports_by_name_what_an_export_would_not_give_back(imported, tmp_path):
    assert imported[SEED.name].round_trip == {"lost": [], "changed": [], "added": []}
    import shutil

    shutil.copytree(DATA / "models", tmp_path / "models")  # the seed sources models/qwen3-4B.sh beside it
    script = tmp_path / "rt.sh"
    script.write_text(SEED.read_text().replace("   --adam-beta2 0.98\n", "   --adam-beta2 0.98\n"
                                               "   --use-precision-aware-optimizer\n   --optimizer-cpu-offload\n"
                                               "   --enable-experimental\n   --allgather-cp\n"))
    r = import_script(script)
    # the CPU offload is train.megatron and comes back; --allgather-cp has no rlrun setting (refused, imported with
    # --allow-unknown as a comment); --enable-experimental changes nothing rlrun runs (a no-op with a note): neither
    # is written back
    assert r.problems == [] and [o.flag for o, _ in r.unknown] == ["--allgather-cp"]
    assert r.round_trip == {"lost": ["--allgather-cp", "--enable-experimental"], "changed": [], "added": []}
    assert "`rlrun export slime` of it loses: --allgather-cp, --enable-experimental" in r.report()
    assert any("--enable-experimental: no change: " in n and "moe_permute_fusion" in n for n in r.notes)


def test_a_value_rlrun_cannot_parse_is_reported_and_never_filled_in_as_absent():
    ok = decode(parse_args(args("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --norm-epsilon 1e-5")))
    assert ok.values["model.norm_epsilon"] == 1e-5 and ok.unknown == []
    bad = decode(parse_args(args("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --norm-epsilon 1e-5x")))
    assert [o.flag for o, _ in bad.unknown] == ["--norm-epsilon"] and "bad value" in bad.unknown[0][1]
    assert bad.values["model.norm_epsilon"] is None  # not Megatron's 1e-5 default as if the flag were absent


def test_model_family_comes_from_the_fields_that_define_it():
    from rlrun.interop.slime_decode import family_of
    base = {"model.qk_layernorm": False, "model.add_qkv_bias": False, "model.post_norms": False,
            "model.moe": None, "model.mla": None}
    assert family_of({**base, "model.qk_layernorm": True}) == "qwen3"
    assert family_of({**base, "model.qk_layernorm": True, "model.moe": None, "model.moe.num_experts": 8}) == "qwen3_moe"
    assert family_of({**base, "model.add_qkv_bias": True}) == "qwen2"  # Qwen2/2.5, MiMo
    assert family_of({**base, "model.post_norms": True}) == "glm4"
    assert family_of(base) == "llama"


def test_export_checks_or_starts_the_ray_it_submits_to():
    """slime's scripts start Ray before `ray job submit` (scripts/run-qwen3-4B.sh: `ray start --head ...`); the
    export checks for a Ray answering first, starts a local head when none does, and stops (exit 2) when a
    given cluster.address does not answer."""
    lines = render_script(load(["experiment=qwen3-4b-grpo-mi300x"]).model_dump(mode="python")).splitlines()
    at = lines.index("if ! ray job list --address=http://127.0.0.1:8265 >/dev/null 2>&1; then")
    assert lines[at + 1].strip().startswith("ray start --head") and "--num-gpus 8" in lines[at + 1]
    assert at < next(i for i, ln in enumerate(lines) if ln.startswith("ray job submit"))
    text = render_script(load(["experiment=qwen3-4b-grpo-mi300x", "cluster.address=http://head:8265"])
                         .model_dump(mode="python"))
    assert "ray start --head" not in text and "exit 2" in text and "no Ray dashboard answers at http://head:8265" in text


def test_a_script_without_its_models_file_names_no_model_it_did_not_match(tmp_path):
    """slime's Qwen3-4B script copied without scripts/models/qwen3-4B.sh: no model.* value to score the model
    options on. The report must not call any model a full match, picks the one whose hub id names the
    --hf-checkpoint folder, and the refusal points at lines that were printed (no did-you-mean here)."""
    script = tmp_path / "run.sh"
    script.write_text(SEED.read_text())  # sources ${SCRIPT_DIR}/models/qwen3-4B.sh, which is not there
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["import", "slime", str(script)], out, err) == 2
    text = err.getvalue()
    assert "all model.* settings match" not in text and "model=glm4-9b" not in text
    assert "  model=qwen3-4b (the script sets no model.* setting: the model whose hub id names --hf-checkpoint " \
           "/root/Qwen3-4B; pass --model NAME to choose another)" in text
    assert "did-you-mean" not in text and "did you mean" not in text
    assert "(model flags)" in text and "Fix the script (as each line above says)" in text
    # a folder no model's hub id names: still no claim of a match, the choice is called a guess
    script.write_text(SEED.read_text().replace("${MODEL_DIR}/Qwen3-4B\n", "${MODEL_DIR}/my-model\n"))
    err = io.StringIO()
    assert cli_main(["import", "slime", str(script)], io.StringIO(), err) == 2
    assert "all model.* settings match" not in err.getvalue()
    assert "the script sets no model.* setting: a guess; pass --model NAME" in err.getvalue()
