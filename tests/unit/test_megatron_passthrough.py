"""train.megatron: megatron-core's own config fields, validated against the pinned megatron-core 0.19.2 (read from
its wheel by tools/megatron_schema.py) and handed unchanged to the objects the megatron backend builds.

megatron-core 0.19.2 needs Python >= 3.12; where megatron-core 0.16.1 (the last for 3.11) is importable, the
construction path (rlrun.train.megatron.model.transformer_config, OptimizerConfig, DistributedDataParallelConfig)
is run for real; otherwise the kwargs the backend passes are checked (the GPU test tests/gpu/test_gpu_megatron_passthrough.py
builds them with the pinned megatron-core)."""
from __future__ import annotations

import glob
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rlrun.config import load
from rlrun.config.errors import ConfigError
from rlrun.train.megatron import passthrough

ROOT = Path(__file__).resolve().parents[2]
H100 = ["hardware=h100", "train.backend=megatron", "checks.memory_fit=warn"]
MOE = ["model=qwen3-30b-a3b", "parallelism=tp4_ep8", *H100]


def _problems(overrides):
    with pytest.raises(ConfigError) as exc:
        load(overrides)
    return {p.path: p for p in exc.value.problems}


def test_schema_matches_the_wheel():
    wheels = glob.glob("/tmp/**/megatron_core-0.19.2-*.whl", recursive=True)
    if not wheels:
        pytest.skip("the megatron-core 0.19.2 wheel is not downloaded (tools/megatron_schema.py says how)")
    spec = importlib.util.spec_from_file_location("megatron_schema", ROOT / "tools/megatron_schema.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.extract_from_wheel(wheels[0]) == json.loads(passthrough.SCHEMA_JSON.read_text())


def test_schema_holds_the_fields_and_flags_slime_uses():
    s = passthrough.schema()
    assert s["megatron_core_version"] == "0.19.2"
    f = s["fields"]
    assert f["optimizer_cpu_offload"]["classes"] == ["OptimizerConfig"]
    assert f["check_for_nan_in_grad"]["classes"] == ["DistributedDataParallelConfig"]
    assert f["moe_token_dispatcher_type"]["choices"] == ["allgather", "alltoall", "flex"]
    assert f["attention_backend"]["choices"] == ["flash", "fused", "unfused", "local", "auto"]
    assert f["mscale"]["classes"] == ["MLATransformerConfig"]
    # Megatron-LM's --optimizer-offload-fraction defaults to 1.0, OptimizerConfig's field to 0.0
    assert (f["optimizer_offload_fraction"]["default"], f["optimizer_offload_fraction"]["cli_default"]) == ("0.0", 1.0)
    flags = s["flags"]
    assert flags["--decoder-last-pipeline-num-layers"] == {"field": "num_layers_in_last_pipeline_stage", "action": "value"}
    assert flags["--no-check-for-nan-in-loss-and-grad"] == {"field": "check_for_nan_in_grad", "action": "store_false"}
    assert flags["--no-masked-softmax-fusion"] == {"field": "masked_softmax_fusion", "action": "store_false"}
    assert flags["--apply-layernorm-1p"]["field"] == "layernorm_zero_centered_gamma"


@pytest.mark.parametrize("flag, values, want", [
    ("--optimizer-cpu-offload", (), ("optimizer_cpu_offload", True)),
    ("--moe-router-bias-update-rate", ("1e-3",), ("moe_router_bias_update_rate", 0.001)),
    ("--moe-router-topk-scaling-factor", ("2.5",), ("moe_router_topk_scaling_factor", 2.5)),
    ("--moe-router-load-balancing-type", ("seq_aux_loss",), ("moe_router_load_balancing_type", "seq_aux_loss")),
    ("--decoder-last-pipeline-num-layers", ("13",), ("num_layers_in_last_pipeline_stage", 13)),
    ("--no-check-for-nan-in-loss-and-grad", (), ("check_for_nan_in_grad", False)),
    ("--moe-token-drop-policy", ("probs",), ("moe_token_drop_policy", "probs")),
    ("--made-up-flag", ("1",), None),
])
def test_resolve_flag(flag, values, want):
    assert passthrough.resolve_flag(flag, values) == want


def test_resolve_flag_refuses_a_wrong_choice():
    with pytest.raises(ValueError, match=r"not one of \['allgather', 'alltoall', 'flex'\]"):
        passthrough.resolve_flag("--moe-token-dispatcher-type", ("all2all",))


def test_validate_refuses_unknown_and_mistyped_fields_with_the_allowed_values():
    got = _problems([*H100, "+train.megatron.optimizer_cpu_ofload=true", "+train.megatron.moe_token_dispatcher_type=a2a",
                     "+train.megatron.overlap_cpu_optimizer_d2h_h2d=yes", "+train.megatron.num_layers=3",
                     "+train.megatron.moe_flex_dispatcher_backend=ncclep"])
    assert 'did you mean "optimizer_cpu_offload"' in got["train.megatron.optimizer_cpu_ofload"].message
    assert "['allgather', 'alltoall', 'flex']" in got["train.megatron.moe_token_dispatcher_type"].message
    assert "must be bool" in got["train.megatron.overlap_cpu_optimizer_d2h_h2d"].message
    assert "model.num_layers" in got["train.megatron.num_layers"].message
    assert "Transformer Engine build with NCCL EP" in got["train.megatron.moe_flex_dispatcher_backend"].message


DEEPEP = ["+train.megatron.moe_token_dispatcher_type=flex", "+train.megatron.moe_enable_deepep=true"]


def test_deepep_passes_validate_and_the_preflight_asks_for_deep_ep():
    """DeepEP is megatron-core's own (the flex dispatcher's deepep backend): the config is valid; whether deep_ep is
    installed is a fact of the machine, which the preflight checks (test_embedded_ray runs it through the CLI)."""
    cfg = load([*MOE, *DEEPEP])
    assert cfg.train.megatron == {"moe_token_dispatcher_type": "flex", "moe_enable_deepep": True}
    assert passthrough.flex_backend(cfg.train.megatron) == "deepep"
    assert passthrough.requires(cfg) == [("train.megatron.moe_enable_deepep", "deep_ep", passthrough.DEEP_EP_INSTALL)]
    hyb = load([*MOE, "+train.megatron.moe_token_dispatcher_type=flex",
                "+train.megatron.moe_flex_dispatcher_backend=hybridep",
                "+train.megatron.moe_hybridep_pad_uneven_dispatch_inputs=true"])
    assert passthrough.requires(hyb)[0][:2] == ("train.megatron.moe_flex_dispatcher_backend", "deep_ep")
    # flex alone runs DeepEP too (the backend's default); alltoall and a dense model need nothing
    assert passthrough.requires(load([*MOE, "+train.megatron.moe_token_dispatcher_type=flex"]))[0][:2] == \
        ("train.megatron.moe_token_dispatcher_type", "deep_ep")
    assert passthrough.requires(load([*MOE, "+train.megatron.moe_token_dispatcher_type=alltoall"])) == []
    assert passthrough.requires(load(["model=qwen3-4b", *H100, *DEEPEP])) == []


def test_flex_dispatcher_settings_megatron_core_refuses():
    # TransformerConfig.__post_init__: "DeepEP backend is only supported with flex token dispatcher."
    got = _problems([*MOE, "+train.megatron.moe_enable_deepep=true"])
    assert "flex" in got["train.megatron.moe_enable_deepep"].message
    assert "moe_token_dispatcher_type=flex" in got["train.megatron.moe_enable_deepep"].fix
    got = _problems([*MOE, *DEEPEP, "+train.megatron.moe_flex_dispatcher_backend=hybridep"])
    assert "refuses hybridep" in got["train.megatron.moe_flex_dispatcher_backend"].message
    got = _problems([*MOE, *DEEPEP, "+train.megatron.moe_pad_expert_input_to_capacity=true",
                     "+train.megatron.moe_expert_capacity_factor=1.0"])
    assert "capacity" in got["train.megatron.moe_pad_expert_input_to_capacity"].message
    # MoEFlexTokenDispatcher asserts expert TP x EP > 1; rlrun runs expert TP 1
    got = _problems(["model=qwen3-30b-a3b", "parallelism.tp=4", "parallelism.ep=1", *H100, *DEEPEP])
    assert "parallelism.ep > 1" in got["train.megatron.moe_token_dispatcher_type"].fix
    # the backend of a dispatcher that is not flex would be ignored
    got = _problems([*MOE, "+train.megatron.moe_flex_dispatcher_backend=hybridep"])
    assert "ignored" in got["train.megatron.moe_flex_dispatcher_backend"].message
    # HybridEP needs equal token counts per rank; rlrun's packed micro-batches differ
    got = _problems([*MOE, "+train.megatron.moe_token_dispatcher_type=flex",
                     "+train.megatron.moe_flex_dispatcher_backend=hybridep"])
    assert "moe_hybridep_pad_uneven_dispatch_inputs=true" in got["train.megatron.moe_flex_dispatcher_backend"].fix


def test_validate_refuses_train_megatron_on_the_torch_backend():
    got = _problems(["+train.megatron.optimizer_cpu_offload=true"])
    assert "train.backend is torch" in got["train.megatron"].message


def test_cpu_offload_needs_the_precision_aware_optimizer_and_fp32_moments():
    got = _problems([*H100, "+train.megatron.optimizer_cpu_offload=true", "optim.state_dtype=bf16"])
    assert "use_precision_aware_optimizer" in got["train.megatron.optimizer_cpu_offload"].message
    assert "hybrid device optimizer" in got["optim.state_dtype"].message
    got = _problems([*H100, "+train.megatron.use_precision_aware_optimizer=true"])
    assert "Transformer Engine" in got["train.megatron.use_precision_aware_optimizer"].message


def test_uneven_pipeline_stages():
    # qwen3-4b: 36 layers; PP 4 with a last stage of 6: 30 over 3 stages = 10 each
    ok = load(["model=qwen3-4b", "parallelism.pp=4", "parallelism.tp=2", *H100,
               "+train.megatron.num_layers_in_last_pipeline_stage=6"])
    assert ok.train.megatron == {"num_layers_in_last_pipeline_stage": 6}
    got = _problems(["model=qwen3-4b", "parallelism.pp=4", "parallelism.tp=2", *H100,
                     "+train.megatron.num_layers_in_last_pipeline_stage=5"])
    assert "does not split evenly" in got["train.megatron.num_layers_in_last_pipeline_stage"].message
    assert "parallelism.pp" not in got  # 36 % 4 == 0 anyway; the uneven split is the one checked


def test_memory_estimate_counts_the_cpu_optimizer_offload():
    from rlrun.config.memory import estimate
    from rlrun.config.sizes import dp_size

    base = load(["model=qwen3-4b", *H100])
    off = load(["model=qwen3-4b", *H100, "+train.megatron.optimizer_cpu_offload=true",
                "+train.megatron.use_precision_aware_optimizer=true", "+train.megatron.optimizer_offload_fraction=0.5"])
    a, b = estimate(base), estimate(off)
    # fp32 master + 2 fp32 moments = 12 B/param over DP; half of it in host memory
    assert a.trainer_optimizer == pytest.approx(12 * a.trainer_params_per_gpu / dp_size(base) / 2**30)
    assert b.trainer_optimizer == pytest.approx(a.trainer_optimizer / 2)
    assert b.trainer_grads == a.trainer_grads and b.trainer_weights == a.trainer_weights


def test_backend_kwargs_carry_the_values():
    pytest.importorskip("torch")
    from rlrun.train.megatron_backend import ddp_kwargs, optimizer_kwargs

    cfg = load(["model=qwen3-4b", *H100, "+train.megatron.optimizer_cpu_offload=true",
                "+train.megatron.overlap_cpu_optimizer_d2h_h2d=true", "+train.megatron.use_precision_aware_optimizer=true",
                "+train.megatron.optimizer_offload_fraction=1.0", "+train.megatron.check_for_nan_in_grad=true",
                "+train.megatron.bucket_size=40000000", "+train.megatron.moe_token_dispatcher_type=allgather"])
    o = optimizer_kwargs(cfg)
    assert (o["optimizer_cpu_offload"], o["overlap_cpu_optimizer_d2h_h2d"], o["use_precision_aware_optimizer"],
            o["optimizer_offload_fraction"], o["lr"]) == (True, True, True, 1.0, cfg.optim.lr)
    assert "moe_token_dispatcher_type" not in o and "check_for_nan_in_grad" not in o
    d = ddp_kwargs(cfg)
    assert (d["check_for_nan_in_grad"], d["bucket_size"], d["grad_reduce_in_fp32"]) == (True, 40000000, True)
    assert passthrough.kwargs_for(cfg.train.megatron, "TransformerConfig") == {"moe_token_dispatcher_type": "allgather"}


@pytest.fixture
def megatron_core():
    """megatron-core 0.16.1 (Python 3.11) where it is installed (MEGATRON_CORE_PATH or site-packages)."""
    import os
    extra = os.environ.get("MEGATRON_CORE_PATH")
    if extra:
        sys.path.insert(0, extra)
    try:
        pytest.importorskip("megatron.core")
        yield
    finally:
        if extra:
            sys.path.remove(extra)


def test_megatron_core_objects_carry_the_values(megatron_core):
    """The backend's own construction code (model.transformer_config, OptimizerConfig/DDP config kwargs) on the
    CPU with a real megatron-core: each family of fields slime's scripts pass arrives in the object."""
    from megatron.core import utils
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.enums import AttnBackend
    from packaging.version import Version

    if utils.get_te_version() is None:  # 0.16.1 without Transformer Engine; the pinned 0.19.2 answers 0.0.0 itself
        utils._te_version = Version("0.0.0")

    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron_backend import ddp_kwargs, optimizer_kwargs

    cfg = load([*MOE, "+train.megatron.moe_token_dispatcher_type=allgather",
                "+train.megatron.moe_router_load_balancing_type=seq_aux_loss",
                "+train.megatron.moe_router_topk_scaling_factor=2.5", "+train.megatron.moe_token_drop_policy=position",
                "+train.megatron.moe_expert_capacity_factor=1.5", "+train.megatron.deterministic_mode=true",
                "+train.megatron.attention_backend=flash", "+train.megatron.optimizer_cpu_offload=true",
                "+train.megatron.overlap_cpu_optimizer_d2h_h2d=true",
                "+train.megatron.use_precision_aware_optimizer=true", "+train.megatron.optimizer_offload_fraction=1.0",
                "+train.megatron.check_for_nan_in_grad=true"])
    tc = mm.transformer_config(cfg.model, cfg.parallelism, cfg.train, cpu_init=True)
    assert (tc.moe_token_dispatcher_type, tc.moe_router_load_balancing_type, tc.moe_router_topk_scaling_factor,
            tc.moe_token_drop_policy, tc.moe_expert_capacity_factor, tc.deterministic_mode,
            tc.attention_backend) == ("allgather", "seq_aux_loss", 2.5, "position", 1.5, True, AttnBackend.flash)
    oc = OptimizerConfig(**optimizer_kwargs(cfg))
    assert (oc.optimizer_cpu_offload, oc.overlap_cpu_optimizer_d2h_h2d, oc.use_precision_aware_optimizer,
            oc.optimizer_offload_fraction) == (True, True, True, 1.0)
    dc = DistributedDataParallelConfig(**ddp_kwargs(cfg))
    assert dc.check_for_nan_in_grad is True


def test_megatron_core_flex_dispatcher_carries_deepep(megatron_core):
    """--moe-token-dispatcher-type flex --moe-enable-deepep as slime's scripts give them: the TransformerConfig the
    backend builds selects megatron-core's flex dispatcher with its deepep backend (the dispatcher itself, which
    imports deep_ep, is built on the GPU: tests/gpu/test_gpu_megatron_passthrough.py)."""
    from megatron.core import utils
    from packaging.version import Version

    if utils.get_te_version() is None:
        utils._te_version = Version("0.0.0")
    from rlrun.train.megatron import model as mm

    cfg = load([*MOE, *DEEPEP, "+train.megatron.moe_deepep_num_sms=24"])
    tc = mm.transformer_config(cfg.model, cfg.parallelism, cfg.train, cpu_init=True)
    assert (tc.moe_token_dispatcher_type, tc.moe_enable_deepep, tc.moe_flex_dispatcher_backend,
            tc.moe_deepep_num_sms) == ("flex", True, "deepep", 24)


def test_megatron_core_uneven_stages(megatron_core):
    from rlrun.train.megatron import model as mm

    cfg = load(["model=qwen3-4b", "parallelism.pp=4", "parallelism.tp=2", *H100,
                "+train.megatron.num_layers_in_last_pipeline_stage=6"])
    tc = mm.transformer_config(cfg.model, cfg.parallelism, cfg.train, cpu_init=True)
    assert tc.num_layers_in_last_pipeline_stage == 6


# ---- rlrun import slime: Megatron flags -> train.megatron ----------------------------------------------------
def _decode(text: str):
    from rlrun.interop.slime_decode import decode, parse_args

    return decode(parse_args(text.split()))


def test_import_fills_train_megatron_from_the_flags_of_the_same_name():
    d = _decode("--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer "
                "--moe-token-dispatcher-type allgather --moe-token-drop-policy probs --moe-router-enable-expert-bias "
                "--moe-router-bias-update-rate 1e-3 --moe-router-load-balancing-type seq_aux_loss "
                "--moe-router-topk-scaling-factor 2.5 --decoder-last-pipeline-num-layers 13 "
                "--no-check-for-nan-in-loss-and-grad --no-masked-softmax-fusion --deterministic-mode")
    assert d.unknown == []
    assert d.values["train.megatron"] == {
        "optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0, "overlap_cpu_optimizer_d2h_h2d": True,
        "moe_token_dispatcher_type": "allgather", "moe_token_drop_policy": "probs",
        "moe_router_enable_expert_bias": True, "moe_router_bias_update_rate": 0.001,
        "moe_router_load_balancing_type": "seq_aux_loss", "moe_router_topk_scaling_factor": 2.5,
        "num_layers_in_last_pipeline_stage": 13, "check_for_nan_in_grad": False, "masked_softmax_fusion": False,
        "deterministic_mode": True, "use_precision_aware_optimizer": True}
    assert any("optimizer_offload_fraction=1.0" in n for n in d.notes)


def test_import_keeps_the_precision_aware_flag_a_no_op_without_the_offload():
    d = _decode("--use-precision-aware-optimizer")
    assert d.unknown == [] and "train.megatron" not in d.values


def test_import_passes_deepep_through_and_refuses_the_architectures_rlrun_lacks_naming_them():
    d = _decode("--moe-enable-deepep --use-gated-attention --attention-output-gate --moe-token-dispatcher-type flex")
    why = {o.flag: w for o, w in d.unknown}
    assert set(why) == {"--use-gated-attention", "--attention-output-gate"}
    assert "gated attention" in why["--attention-output-gate"]
    assert d.values["train.megatron"] == {"moe_enable_deepep": True, "moe_token_dispatcher_type": "flex"}
    assert "train.megatron" not in _decode("--moe-token-dispatcher-type alltoall").values  # what rlrun runs anyway


def test_export_writes_train_megatron_back_as_megatron_flags():
    assert passthrough.to_flags({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0,
                                 "check_for_nan_in_grad": False, "num_layers_in_last_pipeline_stage": 13,
                                 "moe_router_bias_update_rate": 0.001}) == [
        ["--optimizer-cpu-offload"], ["--no-check-for-nan-in-loss-and-grad"],
        ["--decoder-last-pipeline-num-layers", "13"], ["--moe-router-bias-update-rate", "0.001"]]


def test_import_of_slime_flags_for_rlrun_keys():
    d = _decode("--wandb-group g1 --wandb-host https://wandb.example --eval-top-k 20 --rollout-stop-token-ids 7 9 "
                "--lr-warmup-fraction 0.1 --reward-key score --custom-rm-path pkg.mod.reward_func --rm-type math")
    assert d.unknown == []
    v = d.values
    assert (v["logging.wandb.group"], v["logging.wandb.host"], v["eval.top_k"], v["rollout.stop_token_ids"],
            v["optim.lr_warmup_fraction"], v["data.reward_key"]) == ("g1", "https://wandb.example", 20, [7, 9], 0.1,
                                                                     "score")
    assert v["data.rm_type"] == "slime:pkg.mod:reward_func"  # --custom-rm-path beats --rm-type (slime's async_rm)


def test_lr_warmup_fraction_is_a_fraction_of_the_run():
    from types import SimpleNamespace

    from rlrun.train.schedule import warmup_iters

    assert warmup_iters(SimpleNamespace(lr_warmup_fraction=0.1, lr_warmup_iters=0), 3000) == 300
    assert warmup_iters(SimpleNamespace(lr_warmup_fraction=None, lr_warmup_iters=7), 3000) == 7
    got = _problems(["optim.lr_warmup_fraction=0.1", "optim.lr_warmup_iters=5"])
    assert "both" in got["optim.lr_warmup_fraction"].message


def test_eval_top_k_and_stop_token_ids_reach_the_requests():
    from rlrun.rollout.client import Sampling

    cfg = load(["rollout.top_k=50", "rollout.stop_token_ids=[7,9]"])
    assert cfg.eval.top_k == 50  # derived from rollout.top_k
    assert Sampling.from_config(cfg.rollout).to_json()["stop_token_ids"] == [7, 9]
    assert load(["eval.top_k=20"]).eval.top_k == 20


def test_slime_reward_dict_is_read_at_the_reward_key():
    from rlrun.agent.slime_adapter import reward_value

    assert reward_value({"score": 1.0, "acc": 0.0}) == 1.0
    assert reward_value({"score": 1.0, "acc": 0.0}, "acc") == 0.0
    assert reward_value(0.5, "acc") == 0.5
    with pytest.raises(ValueError, match="data.reward_key"):
        reward_value({"acc": 1.0})
