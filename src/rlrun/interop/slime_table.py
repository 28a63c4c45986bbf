"""The rlrun <-> slime mapping, as data: one row per rlrun setting that slime (or Megatron/SGLang through
slime) has a flag for, the bash array slime's scripts put it in, and what slime does when it is absent.

Read by slime_encode.py and slime_decode.py and rendered into docs/slime.md. Facts come from slime's
`slime/utils/arguments.py` (flag names, defaults, derivations in `slime_validate_args`), Megatron-LM's
arguments (model/optimizer flags and their defaults) and sglang-router's RouterArgs. A test checks that
every leaf of the resolved config appears here exactly once, either as a row, a special codec or a
NO_FLAG entry, so a new config field cannot be silently left out of the export.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

# Order in which slime's scripts splice the arrays into the train.py command line.
ARRAYS = (
    "MODEL_ARGS", "CKPT_ARGS", "ROLLOUT_ARGS", "OPTIMIZER_ARGS", "GRPO_ARGS",
    "PERF_ARGS", "EVAL_ARGS", "SGLANG_ARGS", "MISC_ARGS",
)
LAUNCH = "LAUNCH"  # flags written inline on the `python3 train.py` line, as slime's scripts do


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


# slime's default for a flag is unknown or meaningless for rlrun (a path, a required value): an absent
# flag leaves rlrun's own value in place on import.
KEEP: Any = _Keep()
Derived = Callable[[dict], Any]  # slime derives the value from others (keys: rlrun dotted paths)

# Kinds: value `--f V` | true: present <=> True | false: present <=> False | bool: `--f`/`--no-f`
#        | list: `--f V1 V2 ...` (argparse nargs="+")


@dataclass(frozen=True)
class Row:
    path: str
    flag: str
    array: str
    kind: str = "value"
    type: type = str
    default: Any = KEEP  # what slime uses when the flag is absent (a value, a Derived, or KEEP)
    path_like: bool = False  # a filesystem path: round trips compare it modulo its text
    always: bool = False  # export it even when it equals slime's default (the seed scripts spell it out)
    values: tuple[tuple[Any, str], ...] = ()  # rlrun value <-> slime value, where they differ
    section: str | None = None  # an optional config section (model.moe, model.mla) the row lives in
    scale: int = 1  # slime value = rlrun value * scale (a unit change, e.g. MB -> bytes); default in rlrun units
    # slime has no usable default: without the flag it fails (why, with the source). The import refuses a script
    # that leaves it out (slime_checks.absent_required) instead of filling in rlrun's group value.
    required: str = ""


def _colocated(v: dict) -> bool:
    return bool(v["train.colocate"])


def _steps_per_rollout(v: dict) -> int:
    gbs = v.get("train.global_batch_size")
    samples = v["rollout.rollout_batch_size"] * v["rollout.n_samples_per_prompt"]
    return samples // gbs if gbs else 1


def _data_parallel(v: dict) -> int:
    gpus = v["train.num_nodes"] * v["train.gpus_per_node"]
    return gpus // (v["parallelism.tp"] * v["parallelism.pp"] * v["parallelism.cp"])


def _gbs(v: dict) -> int:
    # slime_validate_args derives it from an explicit --num-steps-per-rollout; without either flag Megatron's
    # validate_args sets global_batch_size = micro_batch_size * data_parallel_size. (fill_defaults runs the
    # derived defaults in ROWS order: num_steps_per_rollout is in `v` here only when the script set it.)
    if "train.num_steps_per_rollout" in v:
        return v["rollout.rollout_batch_size"] * v["rollout.n_samples_per_prompt"] // v["train.num_steps_per_rollout"]
    return v["train.micro_batch_size"] * _data_parallel(v)


def _epochs_unused(v: dict) -> Any:
    # slime ignores --num-epoch when --num-rollout is set: then any value is "the default"
    return v["data.num_epochs"] if v.get("rollout.num_rollout") else KEEP


_CHECK_NONZERO_STD = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"

ROWS: tuple[Row, ...] = (
    # ---- inline on the train.py line (slime's Ray placement) -----------------------------------------
    Row("train.num_nodes", "--actor-num-nodes", LAUNCH, type=int, default=1, always=True),
    Row("train.gpus_per_node", "--actor-num-gpus-per-node", LAUNCH, type=int, default=8, always=True),
    Row("train.colocate", "--colocate", LAUNCH, "true", default=False),
    Row("rollout.num_gpus", "--rollout-num-gpus", LAUNCH, type=int,
        default=lambda v: v["train.num_nodes"] * v["train.gpus_per_node"] if _colocated(v) else None),
    Row("train.offload", "--offload-train", LAUNCH, "bool", default=_colocated),
    Row("rollout.offload", "--offload-rollout", LAUNCH, "bool", default=_colocated),
    Row("hardware.gpus_per_node", "--num-gpus-per-node", LAUNCH, type=int, default=8),
    # ---- MODEL_ARGS (Megatron; the architecture must be spelled out, Megatron cannot read HF configs) ----
    Row("model.num_layers", "--num-layers", "MODEL_ARGS", type=int, always=True),
    Row("model.hidden_size", "--hidden-size", "MODEL_ARGS", type=int, always=True),
    Row("model.ffn_hidden_size", "--ffn-hidden-size", "MODEL_ARGS", type=int, always=True),
    Row("model.num_attention_heads", "--num-attention-heads", "MODEL_ARGS", type=int, always=True),
    Row("model.head_dim", "--kv-channels", "MODEL_ARGS", type=int, always=True,
        default=lambda v: v["model.hidden_size"] // v["model.num_attention_heads"]),  # Megatron's default
    Row("model.vocab_size", "--vocab-size", "MODEL_ARGS", type=int, always=True),
    Row("model.rotary_base", "--rotary-base", "MODEL_ARGS", type=float, default=10000.0, always=True),
    Row("model.rotary_percent", "--rotary-percent", "MODEL_ARGS", type=float, default=1.0),
    Row("model.max_position_embeddings", "--max-position-embeddings", "MODEL_ARGS", type=int),
    Row("model.norm_epsilon", "--norm-epsilon", "MODEL_ARGS", type=float, default=1e-5, always=True),
    Row("model.tie_word_embeddings", "--untie-embeddings-and-output-weights", "MODEL_ARGS", "false", default=True),
    Row("model.qk_layernorm", "--qk-layernorm", "MODEL_ARGS", "true", default=False),
    Row("model.add_qkv_bias", "--add-qkv-bias", "MODEL_ARGS", "true", default=False),
    Row("model.swiglu", "--swiglu", "MODEL_ARGS", "true", default=False),
    Row("model.moe.num_experts", "--num-experts", "MODEL_ARGS", type=int, section="model.moe"),
    Row("model.moe.top_k", "--moe-router-topk", "MODEL_ARGS", type=int, default=2, section="model.moe",
        always=True),
    Row("model.moe.expert_ffn_hidden_size", "--moe-ffn-hidden-size", "MODEL_ARGS", type=int,
        default=lambda v: v["model.ffn_hidden_size"], section="model.moe", always=True),
    Row("model.moe.shared_expert_ffn_hidden_size", "--moe-shared-expert-intermediate-size", "MODEL_ARGS",
        type=int, default=0, section="model.moe"),
    Row("model.moe.router", "--moe-router-score-function", "MODEL_ARGS", default="softmax",
        section="model.moe", always=True),
    Row("model.moe.n_group", "--moe-router-num-groups", "MODEL_ARGS", type=int, default=1, section="model.moe"),
    Row("model.moe.topk_group", "--moe-router-group-topk", "MODEL_ARGS", type=int, default=1,
        section="model.moe"),
    # multi-token prediction: Megatron's --mtp-num-layers (None = none), slime's --enable-mtp-training and
    # Megatron's --mtp-loss-scaling-factor (default 0.1); docs/megatron.md "Multi-token prediction"
    Row("model.mtp_num_layers", "--mtp-num-layers", "MODEL_ARGS", type=int, default=0),
    Row("train.mtp.enabled", "--enable-mtp-training", "MISC_ARGS", "true", default=False),
    Row("train.mtp.loss_scaling_factor", "--mtp-loss-scaling-factor", "MISC_ARGS", type=float, default=0.1),
    Row("model.mla.q_lora_rank", "--q-lora-rank", "MODEL_ARGS", type=int, default=None, section="model.mla"),
    Row("model.mla.kv_lora_rank", "--kv-lora-rank", "MODEL_ARGS", type=int, default=512, section="model.mla",
        always=True),
    Row("model.mla.qk_nope_head_dim", "--qk-head-dim", "MODEL_ARGS", type=int, default=128, section="model.mla",
        always=True),
    Row("model.mla.qk_rope_head_dim", "--qk-pos-emb-head-dim", "MODEL_ARGS", type=int, default=64,
        section="model.mla", always=True),
    Row("model.mla.v_head_dim", "--v-head-dim", "MODEL_ARGS", type=int, default=128, section="model.mla",
        always=True),
    # ---- CKPT_ARGS ------------------------------------------------------------------------------------
    Row("checkpoint.hf", "--hf-checkpoint", "CKPT_ARGS", path_like=True,
        required="slime loads the tokenizer and SGLang's weights from it (default None; slime/backends/megatron_utils/"
                 "arguments.py _set_default_megatron_args: tokenizer_model = hf_checkpoint)"),
    Row("checkpoint.ref", "--ref-load", "CKPT_ARGS", path_like=True),
    Row("checkpoint.load", "--load", "CKPT_ARGS", path_like=True, default=None),
    Row("checkpoint.save", "--save", "CKPT_ARGS", path_like=True),
    Row("checkpoint.save_interval", "--save-interval", "CKPT_ARGS", type=int, default=None),
    # ---- ROLLOUT_ARGS ---------------------------------------------------------------------------------
    Row("data.prompt_data", "--prompt-data", "ROLLOUT_ARGS", path_like=True,
        required="slime builds no dataset without it (default None; slime/rollout/data_source.py: `if "
                 "args.rollout_global_dataset and args.prompt_data is not None`), so the first rollout has no prompts"),
    Row("data.input_key", "--input-key", "ROLLOUT_ARGS", default="input", always=True),
    Row("data.label_key", "--label-key", "ROLLOUT_ARGS", default=None),
    Row("data.metadata_key", "--metadata-key", "ROLLOUT_ARGS", default="metadata"),
    Row("data.apply_chat_template", "--apply-chat-template", "ROLLOUT_ARGS", "true", default=False),
    Row("data.shuffle", "--rollout-shuffle", "ROLLOUT_ARGS", "true", default=False),
    Row("data.rm_type", "--rm-type", "ROLLOUT_ARGS",
        required="slime's reward raises NotImplementedError('Rule-based RM type is not specified.') without it "
                 "(default None; slime/rollout/rm_hub/__init__.py async_rm)"),
    Row("data.rm_url", "--rm-url", "ROLLOUT_ARGS", default=None),
    Row("data.reward_key", "--reward-key", "ROLLOUT_ARGS", default=None),
    Row("data.max_prompt_len", "--rollout-max-prompt-len", "ROLLOUT_ARGS", type=int, default=None),
    Row("data.num_epochs", "--num-epoch", "ROLLOUT_ARGS", type=int, default=_epochs_unused),
    Row("rollout.num_rollout", "--num-rollout", "ROLLOUT_ARGS", type=int, always=True),
    Row("rollout.rollout_batch_size", "--rollout-batch-size", "ROLLOUT_ARGS", type=int, always=True,
        required="slime's argparse requires it (slime/utils/arguments.py: required=True)"),
    Row("rollout.n_samples_per_prompt", "--n-samples-per-prompt", "ROLLOUT_ARGS", type=int, default=1,
        always=True),
    Row("rollout.max_response_len", "--rollout-max-response-len", "ROLLOUT_ARGS", type=int, always=True,
        required="slime's SGLang rollout sends max_new_tokens=None and then runs `sampling_params['max_new_tokens'] -= "
                 "sample.response_length`: a TypeError on the first request (default None; slime/rollout/"
                 "sglang_rollout.py GenerateState and generate); nothing bounds a response, so no token budget "
                 "(--max-tokens-per-gpu) or context can be checked against it"),
    Row("rollout.temperature", "--rollout-temperature", "ROLLOUT_ARGS", type=float, default=1.0, always=True),
    Row("rollout.top_p", "--rollout-top-p", "ROLLOUT_ARGS", type=float, default=1.0),
    Row("rollout.top_k", "--rollout-top-k", "ROLLOUT_ARGS", type=int, default=-1),
    Row("rollout.stop", "--rollout-stop", "ROLLOUT_ARGS", "list", default=[]),
    Row("rollout.stop_token_ids", "--rollout-stop-token-ids", "ROLLOUT_ARGS", "list", type=int, default=[]),
    Row("rollout.over_sampling_batch_size", "--over-sampling-batch-size", "ROLLOUT_ARGS", type=int,
        default=lambda v: v["rollout.rollout_batch_size"]),
    Row("rollout.dynamic_sampling", "--dynamic-sampling-filter-path", "ROLLOUT_ARGS", default=None,
        values=(("nonzero_std", _CHECK_NONZERO_STD),)),
    Row("rollout.partial_rollout", "--partial-rollout", "ROLLOUT_ARGS", "true", default=False),
    Row("rollout.mask_offpolicy_in_partial_rollout", "--mask-offpolicy-in-partial-rollout", "ROLLOUT_ARGS", "true",
        default=False),
    # R3 (slime/utils/arguments.py; scripts/low_precision/run-qwen3-30b-a3b-fp8.sh lists it with SGLANG_ARGS)
    Row("rollout.routing_replay", "--use-rollout-routing-replay", "SGLANG_ARGS", "true", default=False),
    # train_async.py's flags (slime writes them on the launch line of its async examples)
    Row("rollout.async_buffer_size", "--async-buffer-size", LAUNCH, type=int, default=1),
    Row("rollout.update_weights_interval", "--update-weights-interval", LAUNCH, type=int, default=1),
    Row("rollout.context_length", "--rollout-max-context-len", "ROLLOUT_ARGS", type=int,
        default=lambda v: v["model.max_position_embeddings"]),
    Row("train.global_batch_size", "--global-batch-size", "ROLLOUT_ARGS", type=int, default=_gbs, always=True),
    Row("train.num_steps_per_rollout", "--num-steps-per-rollout", "ROLLOUT_ARGS", type=int,
        default=_steps_per_rollout),
    Row("rollout.balance_data", "--balance-data", "ROLLOUT_ARGS", "true", default=False),
    # ---- EVAL_ARGS (slime falls back to the rollout's sampling settings) ------------------------------
    Row("eval.interval", "--eval-interval", "EVAL_ARGS", type=int, default=None),
    Row("eval.n_samples_per_prompt", "--n-samples-per-eval-prompt", "EVAL_ARGS", type=int, default=1),
    Row("eval.max_response_len", "--eval-max-response-len", "EVAL_ARGS", type=int,
        default=lambda v: v["rollout.max_response_len"]),
    Row("eval.top_p", "--eval-top-p", "EVAL_ARGS", type=float, default=lambda v: v["rollout.top_p"]),
    Row("eval.temperature", "--eval-temperature", "EVAL_ARGS", type=float,
        default=lambda v: v["rollout.temperature"]),
    Row("eval.top_k", "--eval-top-k", "EVAL_ARGS", type=int, default=lambda v: v["rollout.top_k"]),
    # ---- PERF_ARGS ------------------------------------------------------------------------------------
    Row("parallelism.tp", "--tensor-model-parallel-size", "PERF_ARGS", type=int, default=1, always=True),
    Row("parallelism.sequence_parallel", "--sequence-parallel", "PERF_ARGS", "true", default=False),
    Row("parallelism.pp", "--pipeline-model-parallel-size", "PERF_ARGS", type=int, default=1, always=True),
    Row("parallelism.cp", "--context-parallel-size", "PERF_ARGS", type=int, default=1, always=True),
    Row("parallelism.ep", "--expert-model-parallel-size", "PERF_ARGS", type=int, default=1, always=True),
    Row("train.recompute.granularity", "--recompute-granularity", "PERF_ARGS", default=None),
    Row("train.recompute.method", "--recompute-method", "PERF_ARGS", default=None),
    Row("train.recompute.num_layers", "--recompute-num-layers", "PERF_ARGS", type=int, default=None),
    Row("train.micro_batch_size", "--micro-batch-size", "PERF_ARGS", type=int, default=1),
    Row("train.use_dynamic_batch_size", "--use-dynamic-batch-size", "PERF_ARGS", "true", default=False),
    Row("train.max_tokens_per_gpu", "--max-tokens-per-gpu", "PERF_ARGS", type=int, default=None),
    Row("train.log_probs_max_tokens_per_gpu", "--log-probs-max-tokens-per-gpu", "PERF_ARGS", type=int,
        default=lambda v: v["train.max_tokens_per_gpu"]),
    # ---- GRPO_ARGS ------------------------------------------------------------------------------------
    Row("algo.advantage_estimator", "--advantage-estimator", "GRPO_ARGS", default="grpo", always=True),
    Row("algo.normalize_std", "--disable-grpo-std-normalization", "GRPO_ARGS", "false", default=True),
    Row("algo.normalize_advantages", "--normalize-advantages", "GRPO_ARGS", "true", default=False),
    Row("algo.use_kl_loss", "--use-kl-loss", "GRPO_ARGS", "true", default=False),
    Row("algo.kl_loss_coef", "--kl-loss-coef", "GRPO_ARGS", type=float, default=0.0, always=True),
    Row("algo.kl_loss_type", "--kl-loss-type", "GRPO_ARGS", default="k1", always=True),
    Row("algo.use_unbiased_kl", "--use-unbiased-kl", "GRPO_ARGS", "true", default=False),
    Row("algo.kl_coef", "--kl-coef", "GRPO_ARGS", type=float, default=0.0),
    Row("algo.entropy_coef", "--entropy-coef", "GRPO_ARGS", type=float, default=0.0, always=True),
    Row("algo.eps_clip", "--eps-clip", "GRPO_ARGS", type=float, default=0.2, always=True),
    Row("algo.eps_clip_high", "--eps-clip-high", "GRPO_ARGS", type=float, default=lambda v: v["algo.eps_clip"]),
    Row("algo.dual_clip_c", "--eps-clip-c", "GRPO_ARGS", type=float, default=None),
    Row("algo.gamma", "--gamma", "GRPO_ARGS", type=float, default=1.0),
    Row("algo.lambd", "--lambd", "GRPO_ARGS", type=float, default=1.0),
    Row("algo.value_clip", "--value-clip", "GRPO_ARGS", type=float, default=0.2),
    Row("algo.use_tis", "--use-tis", "GRPO_ARGS", "true", default=False),
    Row("algo.tis_clip", "--tis-clip", "GRPO_ARGS", type=float, default=2.0),
    Row("algo.tis_clip_low", "--tis-clip-low", "GRPO_ARGS", type=float, default=0.0),
    Row("algo.use_rollout_logprobs", "--use-rollout-logprobs", "GRPO_ARGS", "true", default=False),
    Row("algo.use_opsm", "--use-opsm", "GRPO_ARGS", "true", default=False),
    Row("algo.opsm_delta", "--opsm-delta", "GRPO_ARGS", type=float, default=1e-4),
    Row("train.calculate_per_token_loss", "--calculate-per-token-loss", "GRPO_ARGS", "true", default=False),
    Row("algo.distill.coef", "--opd-kl-coef", "GRPO_ARGS", type=float, default=1.0),
    Row("algo.distill.teacher", "--opd-teacher-load", "GRPO_ARGS", default=None, path_like=True),
    Row("algo.loss_type", "--loss-type", "GRPO_ARGS", default="policy_loss",
        values=(("policy_loss", "policy_loss"), ("sft_loss", "sft_loss"))),  # custom_loss: refused (no rlrun form)
    # ---- OPTIMIZER_ARGS (absent flags take Megatron's defaults) --------------------------------------
    Row("optim.optimizer", "--optimizer", "OPTIMIZER_ARGS", default="adam", always=True),
    Row("optim.lr", "--lr", "OPTIMIZER_ARGS", type=float, default=1e-6, always=True),
    Row("optim.min_lr", "--min-lr", "OPTIMIZER_ARGS", type=float, default=0.0),
    Row("optim.lr_decay_style", "--lr-decay-style", "OPTIMIZER_ARGS", default="linear", always=True),
    Row("optim.lr_warmup_iters", "--lr-warmup-iters", "OPTIMIZER_ARGS", type=int, default=0),
    Row("optim.lr_warmup_fraction", "--lr-warmup-fraction", "OPTIMIZER_ARGS", type=float, default=None),
    Row("optim.weight_decay", "--weight-decay", "OPTIMIZER_ARGS", type=float, default=0.01, always=True),
    Row("optim.adam_beta1", "--adam-beta1", "OPTIMIZER_ARGS", type=float, default=0.9, always=True),
    Row("optim.adam_beta2", "--adam-beta2", "OPTIMIZER_ARGS", type=float, default=0.999, always=True),
    Row("optim.adam_eps", "--adam-eps", "OPTIMIZER_ARGS", type=float, default=1e-8),
    Row("optim.clip_grad", "--clip-grad", "OPTIMIZER_ARGS", type=float, default=1.0),
    # bf16 also exports --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer (slime_encode._encode_misc)
    Row("optim.state_dtype", "--exp-avg-dtype", "OPTIMIZER_ARGS", default="fp32"),
    # ---- SGLANG_ARGS ----------------------------------------------------------------------------------
    Row("rollout.gpus_per_engine", "--rollout-num-gpus-per-engine", "SGLANG_ARGS", type=int, default=1,
        always=True),
    Row("rollout.mem_fraction_static", "--sglang-mem-fraction-static", "SGLANG_ARGS", type=float),
    Row("rollout.max_concurrency", "--sglang-server-concurrency", "SGLANG_ARGS", type=int, default=512),
    Row("rollout.request_timeout_s", "--sglang-router-request-timeout-secs", "SGLANG_ARGS", type=int,
        default=14400),
    Row("rollout.router.policy", "--router-policy", "SGLANG_ARGS", default="cache_aware"),
    Row("rollout.router.request_timeout_s", "--router-request-timeout-secs", "SGLANG_ARGS", type=int,
        default=1800),  # sglang-router's RouterArgs default
    # ---- MISC_ARGS ------------------------------------------------------------------------------------
    Row("run.seed", "--seed", "MISC_ARGS", type=int, default=1234),
    Row("rollout.weight_sync_bucket_mb", "--update-weight-buffer-size", "MISC_ARGS", type=int, default=512,
        scale=1 << 20),  # slime: bytes, default 512 * 1024**2
    # rollout.weight_sync=delta's settings (slime_weight_sync.py maps --update-weight-mode / -transport)
    Row("rollout.delta.encoding", "--update-weight-delta-encoding", "MISC_ARGS", default="xor"),
    Row("rollout.delta.checksum", "--update-weight-delta-checksum", "MISC_ARGS", default="xxh3-128"),
    Row("rollout.delta.dir", "--update-weight-disk-dir", "MISC_ARGS", default=None, path_like=True),
    Row("rollout.delta.local_dir", "--update-weight-local-checkpoint-dir", "MISC_ARGS", default=None,
        path_like=True),
    Row("train.gradient_accumulation_fusion", "--no-gradient-accumulation-fusion", "MISC_ARGS", "false",
        default=True),
    Row("train.fp32_grads", "--accumulate-allreduce-grads-in-fp32", "MISC_ARGS", "true", default=False),
    Row("logging.tensorboard", "--use-tensorboard", "MISC_ARGS", "true", default=False),
)

# slime's token-level icepop: algo.tis_mode=mask with tis_level=token (slime/backends/megatron_utils/loss.py)
ICEPOP_FUNCTION = "slime.backends.megatron_utils.loss.icepop_function"

# Settings with a codec of their own in slime_encode.py/slime_decode.py (one flag is not one setting there).
SPECIAL: dict[str, str] = {
    "rollout.weight_sync": "`--update-weight-mode delta --update-weight-transport disk` is delta, `--update-weight-"
    "transport disk` (full mode) is disk; neither: slime picks CUDA IPC with --colocate, a broadcast without, as "
    "rlrun's auto does (slime_weight_sync.py)",
    "algo.tis_mode": f"mask (with tis_level=token) is `--custom-tis-function-path {ICEPOP_FUNCTION}`; truncate: "
    "no flag (slime's built-in TIS); slime's MIS example (`--custom-tis-function-path ...mis.compute_mis_weights_with_cp` "
    "and a `--custom-config-path` YAML) is read on import (slime_mis.py); the export writes a comment for it and for "
    "reject",
    "algo.distill.where": "trainer is `--use-opd --opd-type megatron` (the teacher's forward on the trainer ranks; "
    "the export writes both with algo.distill.teacher set); engine is `--use-opd --opd-type sglang` with slime's OPD "
    "reward and post-process functions posting to `--rm-url` (slime_modes.py)",
    "algo.distill.url": "`--rm-url` with `--opd-type sglang` (the teacher server slime's OPD reward function asks)",
    "algo.distill.reward": "slime always adds the distillation term to the reward advantage (add); replace is what "
    "its --opd-type sglang example gets from a post-process function returning 0 rewards: no flag, the export "
    "writes a comment",
    "algo.opsm_reference": "slime has no flag: it always measures OPSM against old_log_probs; the import sets `old` "
    "with --use-opsm, the export of `rollout` writes a comment",
    "algo.tis_reject_scope": "`all` is what slime does when its MIS function rejects (mask mode, use_rs, veto); "
    "`pg` is its icepop function's (slime_mis.py sets it on import)",
    "algo.use_rs": "use_rs in the YAML of `--custom-config-path` with slime's MIS function (slime_mis.py)",
    "algo.rs_level": "rs_level in the MIS YAML (slime_mis.py)",
    "algo.rs_clip": "rs_upper_bound in the MIS YAML (null there: tis_upper_bound)",
    "algo.rs_clip_low": "rs_lower_bound in the MIS YAML (null there: the TIS lower bound)",
    "algo.rs_veto_threshold": "rs_veto_threshold in the MIS YAML (slime_mis.py)",
    "algo.tis_batch_normalize": "tis_batch_normalize in the MIS YAML (slime_mis.py)",
    "model.num_query_groups": "`--group-query-attention --num-query-groups N` (absent: N = heads)",
    "model.rope_scaling_factor": "`--rotary-scaling-factor F` (llama family adds `--use-rope-scaling`); absent: 1",
    "model.post_norms": "`--post-self-attn-layernorm --post-mlp-layernorm` (GLM-4)",
    "model.family": "family flags: GLM-4 `--spec slime_plugins.models.glm4 get_glm_spec --rotary-interleaved "
    "--no-rope-fusion`",
    "model.moe": "`--num-experts` present <=> MoE; MoE runtime flags (grouped GEMM, alltoall, fp32 router)",
    "model.moe.first_k_dense": "`--moe-layer-freq \"[0]*K+[1]*(L-K)\"` (absent: every layer MoE)",
    "model.mla": "`--multi-latent-attention` present <=> MLA",
    "eval.datasets": "`--eval-prompt-data NAME PATH [NAME PATH ...]` (rm_type: slime uses --rm-type for eval), or "
                     "an `--eval-config` YAML (imported: each dataset's rm_type, n_samples_per_eval_prompt, "
                     "temperature, top_p, top_k, max_response_len; rlrun.interop.slime_eval)",
    "logging.wandb.mode": "disabled: no flag; offline/online: `--use-wandb --wandb-mode MODE`",
    "logging.wandb.project": "`--wandb-project` (only with wandb on)",
    "logging.wandb.entity": "`--wandb-team` (only with wandb on)",
    "logging.wandb.group": "`--wandb-group` (only with wandb on)",
    "logging.wandb.host": "`--wandb-host` (only with wandb on)",
    "train.megatron": "each megatron-core field K under the Megatron-LM flag that sets it (`--K` with dashes, "
    "`--no-K` for a switch that defaults on, or Megatron-LM's own name such as `--decoder-last-pipeline-num-layers` "
    "for num_layers_in_last_pipeline_stage; rlrun.train.megatron.passthrough, from megatron/training/arguments.py)",
    "rollout.sglang": "each key K becomes `--sglang-K` (underscores to dashes); true -> bare flag. Import "
    "checks `--sglang-*` against the pinned SGLang ServerArgs (abbreviations expanded and noted)",
    "train.async_train": "entry point `train_async.py` instead of `train.py`",
    "rollout.max_staleness": "slime's train_async.py bounds staleness by --async-buffer-size alone",
    "algo.reward_post_process": "`--custom-reward-post-process-path a.b.f` <-> `slime:a.b:f` (slime's "
                                "post_process_rewards(args, samples), run by rlrun.agent.slime_rollout; its rewards "
                                "replace the group normalisation)",
    "rollout.rollout_fn": "`--rollout-function-path a.b.f` <-> `slime:a.b:f` (slime's rollout function, run by "
    "rlrun.agent.slime_rollout; slime's default sglang_rollout.generate_rollout is rlrun's own rollout: null)",
    "rollout.generate_fn": "`--custom-generate-function-path a.b.f` <-> `slime:a.b:f` (slime's form only; "
    "slime_agent.py)",
    "data.source": "not exported: slime's `--data-source-path` classes take (args), rlrun's (prompts, n) "
    "(slime_agent.py)",
    "hardware.env": "`export VAR=value` lines before `ray job submit`",
    "cluster.address": "the `ray job submit --address` (a `ray://`/`http://` address; default the local head)",
}

# Settings slime has no flag for: printed as comments by the export, left to rlrun's groups on import.
NO_FLAG: dict[str, str] = {
    "algo.distill.served": "slime starts no teacher engine (its --opd-type sglang script launches an SGLang server "
    "itself): the export writes a comment",
    "reward.model": "slime starts no reward engines (its rewards are --rm-type rules, --rm-url servers and "
    "--custom-rm-path functions): the export writes a comment",
    "model.lora": "slime has no LoRA (its pull request is open at 624b824a): an exported LoRA run would fine-tune "
    "the whole model; the import leaves model.lora.rank 0",
    "run.name": "slime names runs through wandb (--wandb-group)",
    "run.output_dir": "slime writes to --save and wandb",
    "run.resume": "slime resumes whenever --load holds a checkpoint: `--load` = `--save` imports as auto, and the "
    "export writes `--load` = checkpoint.save unless resume is never",
    "run.dry_run": "slime has no dry run (`rlrun plan` is one)",
    "checks": "rlrun's run invariants and stall watchdog (docs/observability.md); slime checks none of these",
    "rollout.max_engine_restarts": "slime's --use-fault-tolerance restarts engines without a bound; rlrun gives "
    "up on an engine after this many restarts (docs/rollout.md)",
    "data.toy_task": "rlrun's packaged toy task (data.prompt_data null); slime always reads --prompt-data",
    "checkpoint.random_init": "slime always loads --hf-checkpoint (random weights: rlrun only); the export "
    "passes checkpoint.hf, the import leaves it false",
    "model.hub_id": "the HF repo a model profile's weights come from (checkpoint.hf is derived from it, and "
    "exported as --hf-checkpoint); slime names the checkpoint only",
    "checkpoint.keep_last": "slime (Megatron's save) keeps every checkpoint it writes; the import leaves it null "
    "(keep all)",
    "checkpoint.async_save": "rlrun's trainer writes its own checkpoint format in the background (rlrun.train."
    "async_save); Megatron-LM's --async-save is for its torch_dist format, left to slime's defaults; the import "
    "keeps rlrun's default",
    "cluster.num_nodes": "the Ray cluster is started outside slime (`ray start`); the import sizes it from the "
    "launch flags (slime_import.cluster_nodes)",
    "cluster.cpus_per_node": "sizes rlrun's own Slurm/KubeRay launchers (`rlrun export slurm|kuberay`)",
    "cluster.slurm": "rlrun's sbatch export only (slime leaves starting Ray to the user)",
    "cluster.kuberay": "rlrun's RayJob export only",
    "hardware.name": "hardware is implied by the env exports",
    "hardware.vendor": "implied by the env exports (HIP_* on ROCm)",
    "hardware.memory_gib": "used by rlrun's memory plan only",
    "hardware.peak_bf16_tflops": "used by rlrun's plan (MFU) only",
    "hardware.fp8": "a capability rlrun's rules read (rollout.fp8); slime has no flag",
    "hardware.fp8_push": "a capability rlrun's rules read (rollout.fp8); slime has no flag",
    "hardware.defaults.offload_train": "exported as the resolved --offload-train",
    "hardware.defaults.offload_rollout": "exported as the resolved --offload-rollout",
    "hardware.defaults.gradient_accumulation_fusion": "exported as the resolved gradient-accumulation fusion",
    "hardware.defaults.mem_fraction_static": "exported as the resolved --sglang-mem-fraction-static",
    "model.name": "slime identifies the model by its flags and --hf-checkpoint",
    "optim.critic_lr": "slime sets the critic's lr in a role=critic entry of --megatron-config-path",
    "train.backend": "slime trains with Megatron (rlrun's torch backend has no slime equivalent)",
    "train.cuda_graphs": "rlrun's own micro-batch graphs without Transformer Engine (slime's Megatron "
                         "--cuda-graph-impl captures per layer through TE)",
    "rollout.engine": "slime always serves rollouts with SGLang",
    "rollout.max_retries": "slime's rollout client does not retry failed requests",
    "rollout.retry_window_s": "slime's rollout client does not retry failed requests (rlrun's retries outlast a "
    "lost engine's removal from the router, docs/rollout.md)",
    "rollout.delta.full_every": "slime keeps every published delta version (no flag bounds them); rlrun publishes a "
    "full version every N syncs and deletes the older ones",
    "rollout.engine_start_timeout_s": "slime waits for its engines' health without a bound (a server that hangs "
    "while it starts stalls the run); rlrun bounds each engine's start and shows its log's tail",
    "rollout.weight_sync_timeout_s": "slime's weight sync waits without a bound (a stuck NCCL collective hangs the "
    "run); rlrun bounds each step of a push and names the stuck one",
    "rollout.router.kind": "slime always starts sglang-router in front of its engines",
    "rollout.router.host": "slime starts its own router; --sglang-router-ip would point it at an external one",
    "rollout.router.port": "slime starts its own router; --sglang-router-port would point it at an external one",
    "data.name": "a label for rlrun's data group",
    "algo.name": "a label for rlrun's algo group (slime names the estimator: --advantage-estimator)",
    "algo.tis_level": "slime's built-in TIS is token level; sequence/geometric come from its MIS example's YAML "
                      "(examples/train_infer_mismatch_helper/mis.py), which the import reads (slime_mis.py)",
    "logging.progress": "slime logs to stdout/wandb",
    "logging.rollout_records": "slime saves whole rollouts with --save-debug-rollout-data PATH (one .pt per rollout)",
    "debug.rollout_only": "slime's --debug-rollout-only (not mapped by export/import yet)",
    "debug.profile_steps": "slime profiles through --use-pytorch-profiler and --profile-step-start/end",
    "debug.profile_engines": "slime has no engine-profile flag",
    "rollout.fp8": "slime has no flag: its FP8 rollout is an FP8 --hf-checkpoint that SGLang loads (scripts/"
    "low_precision/run-qwen3-4b-fp8.sh); rlrun writes the engines' FP8 dir itself and quantizes each sync "
    "(docs/rollout.md)",
    "rollout.max_turns": "slime has no flag: a custom generate function keeps its own (examples/search-r1: "
    "SEARCH_R1_CONFIGS['max_turns']); rlrun passes it to slime-form functions as args.max_turns",
    "rollout.tool_timeout_s": "slime has no tool runner; its generate functions time their own tools",
}

# rlrun settings whose null means "derived" (rlrun.config.derive): an imported value equal to what rlrun
# derives is left out of the experiment.
RLRUN_DERIVED = frozenset({
    "train.offload", "train.global_batch_size", "train.num_steps_per_rollout", "train.log_probs_max_tokens_per_gpu",
    "train.gradient_accumulation_fusion", "rollout.over_sampling_batch_size", "rollout.num_gpus",
    "rollout.context_length", "rollout.offload", "eval.max_response_len", "eval.top_p", "eval.temperature", "eval.top_k",
    "algo.eps_clip_high", "checkpoint.ref", "algo.rs_clip", "algo.rs_clip_low",
})

# rlrun derives one setting of a pair from the other (rlrun.config.derive). A script that sets only one side gets
# null on the other, so that rlrun derives it and a problem names the flag the user set (a derived
# num_steps_per_rollout = 256 // 512 = 0 would otherwise be blamed). Without either flag the import keeps
# Megatron's global batch size (micro_batch_size * DP) and derives the steps from it.
DERIVED_FROM: dict[str, str] = {
    "train.num_steps_per_rollout": "train.global_batch_size",
    "train.global_batch_size": "train.num_steps_per_rollout",
}


@dataclass(frozen=True)
class Override:
    """slime or Megatron replacing what a script's flags say with another value (a fact of their argument
    handling): `applies(values, seen flags)` -> the value they use instead is `value(values)`, and the
    import says so with `why` (formatted with the flag values: {name} is values[name] with dots as _)."""

    path: str
    flag: str  # the flag whose value is replaced (the note points at it)
    applies: Callable[[dict, set], bool]
    value: Callable[[dict], Any]
    why: str
    source: str


def _load_is_save(v: dict, seen: set) -> bool:
    load, save = v.get("checkpoint.load"), v.get("checkpoint.save")
    return bool(load and save) and os.path.normpath(load) == os.path.normpath(save)


OVERRIDES: tuple[Override, ...] = (
    # slime's scripts point --load at --save: Megatron loads a checkpoint there when one exists and starts from
    # --ref-load/--hf-checkpoint otherwise, which is rlrun's run.resume=auto over checkpoint.save (a
    # checkpoint.load must hold a checkpoint). run.resume first: the second override clears what it reads.
    Override("run.resume", "--load", _load_is_save, lambda v: "auto",
             "--load {checkpoint_load} is the --save folder: slime resumes from it when it holds a checkpoint and "
             "starts fresh otherwise; imported as run.resume=auto (resume from checkpoint.save) with "
             "checkpoint.load=null", "Megatron-LM megatron/training/checkpointing.py load_checkpoint (no tracker "
             "file: start without loading)"),
    Override("checkpoint.load", "--load", _load_is_save, lambda v: None, "", "(with run.resume above)"),
    Override("model.num_query_groups", "--num-query-groups",
             lambda v, seen: "--num-query-groups" in seen and "--group-query-attention" not in seen,
             lambda v: v["model.num_attention_heads"],
             "--num-query-groups {model_num_query_groups} without --group-query-attention: Megatron builds "
             "multi-head attention ({model_num_attention_heads} KV groups); add --group-query-attention for GQA",
             "Megatron-LM megatron/training/argument_utils.py (num_query_groups only with group_query_attention)"),
    Override("parallelism.sequence_parallel", "--sequence-parallel",
             lambda v, seen: v.get("parallelism.sequence_parallel") is True and v.get("parallelism.tp") == 1,
             lambda v: False,
             "--sequence-parallel at tensor-parallel size 1: Megatron turns it off (nothing to shard); imported "
             "as sequence_parallel=false",
             "Megatron-LM megatron/training/arguments.py validate_args (tensor_model_parallel_size == 1)"),
)
# Flags slime reads but ignores in the presence of another: (flag, the other, why) -> a warning on import.
IGNORED_WITH: tuple[tuple[str, str, str], ...] = (
    ("--num-epoch", "--num-rollout", "slime ignores --num-epoch when --num-rollout is set (slime_validate_args); "
     "the run lasts --num-rollout rollouts"),
)

# Flags rlrun's export always writes with these values (Megatron settings rlrun fixes rather than exposes).
# An imported script that spells them the same way loses nothing; a different value is reported.
CONSTANT_FLAGS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("MODEL_ARGS", "--use-rotary-position-embeddings", ()),
    ("MODEL_ARGS", "--disable-bias-linear", ()),
    ("MODEL_ARGS", "--normalization", ("RMSNorm",)),
    ("PERF_ARGS", "--expert-tensor-parallel-size", ("1",)),
    ("MISC_ARGS", "--attention-dropout", ("0.0",)),
    ("MISC_ARGS", "--hidden-dropout", ("0.0",)),
    ("MISC_ARGS", "--attention-softmax-in-fp32", ()),
)
# `--attention-backend flash` does not apply to MLA, as slime's scripts note.
ATTENTION_BACKEND = ("MISC_ARGS", "--attention-backend", ("flash",))
FAMILY_FLAGS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "glm4": (("--spec", ("slime_plugins.models.glm4", "get_glm_spec")), ("--rotary-interleaved", ()),
             ("--no-rope-fusion", ())),
    "deepseek_v3": (("--no-rope-fusion", ()),),
}
MOE_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--moe-grouped-gemm", ()), ("--moe-token-dispatcher-type", ("alltoall",)), ("--moe-router-dtype", ("fp32",)),
    ("--moe-permute-fusion", ()), ("--moe-aux-loss-coeff", ("0",)),
)
# Spellings that mean the same to Megatron; the key is canonicalised to the value.
ALIASES: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {
    ("--position-embedding-type", ("rope",)): ("--use-rotary-position-embeddings", ()),
}
# Flags whose value must never be copied into a file (a credential).
SECRET_FLAGS = frozenset({"--wandb-key"})

ENTRY_SYNC = "train.py"
ENTRY_ASYNC = "train_async.py"
DEFAULT_SUBMIT_ADDRESS = "http://127.0.0.1:8265"
# Env vars of the script's own plumbing, not of the hardware: not imported into hardware.env.
PLUMBING_ENV = frozenset({
    "PYTHONUNBUFFERED", "PYTHONPATH", "MASTER_ADDR", "SLIME_DIR", "MODEL_DIR", "DATA_DIR", "BASE_DIR",
    "no_proxy", "LD_LIBRARY_PATH", "NCCL_NVLS_ENABLE",
})


def rows_by_flag() -> dict[str, Row]:
    return {r.flag: r for r in ROWS}


# Flags slime itself fixes or treats as a placeholder, so that a script giving them changes nothing:
# flag -> (the values that are a no-op, or None for any value; why, with the source). Imported with a note.
NO_OP_FLAGS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "--use-distributed-optimizer": ((), "slime always uses Megatron's distributed optimizer "
                                        "(slime/backends/megatron_utils/arguments.py _set_default_megatron_args)"),
    "--bf16": ((), "slime trains in bf16 unless --fp16 (_set_default_megatron_args: args.bf16 = not args.fp16)"),
    "--seq-length": (None, "a placeholder for slime, which packs variable-length sequences "
                           "(_set_default_megatron_args; validate_args sets variable_seq_lengths)"),
    "--max-position-embeddings": (None, "Megatron's training position limit (slime packs variable-length "
                                        "sequences; with RoPE it only sets YaRN's original length, "
                                        "_set_default_megatron_args); the model's and SGLang's context come from "
                                        "the checkpoint's config.json, which rlrun's model group holds (a value "
                                        "below a sample's length or below --seq-length is refused: slime_checks)"),
    "--train-backend": (("megatron",), "slime's only training backend (slime/utils/arguments.py: "
                                       "choices=['megatron']); rlrun imports it as train.backend=megatron"),
    "--no-position-embedding": ((), "Megatron's learned absolute position embedding is off; with rotary positions "
                                    "(which rlrun always uses: --position-embedding-type rope) GPTModel builds none "
                                    "anyway (megatron-core LanguageModelEmbedding adds one only for learned_absolute)"),
    "--data-pad-size-multiplier": (None, "slime pads each packed micro-batch to a multiple of TP x this (default 128; "
                                         "slime/backends/megatron_utils/cp_utils.py) for kernel shapes; the pad "
                                         "tokens carry no loss, so the step's math is the same; rlrun's packing pads "
                                         "to what sequence parallelism needs (rlrun.train.megatron.packing)"),
    "--enable-experimental": ((), "Megatron-LM's switch for megatron.core.config.set_experimental_flag; in the "
                                   "pinned megatron-core 0.19.2 the flag selects only the fused pad-routing-map and "
                                   "indices-to-multihot kernels under moe_permute_fusion "
                                   "(transformer/moe/token_dispatcher.py), which rlrun's unfused MoE permutation "
                                   "does not use: the same math"),
    "--log-probs-chunk-size": (None, "slime computes log-probs in chunks of this many tokens to save memory "
                                     "(slime/utils/arguments.py); rlrun's megatron backend always does, never "
                                     "keeping a [tokens, vocab] logits tensor (rlrun.algo.token_stats."
                                     "linear_logp_entropy, ~512 MB of fp32 logits per chunk): memory only, the "
                                     "log-probs are the same"),
}

# The slime/Megatron feature a flag belongs to, where rlrun lacks that feature: a refusal names the feature.
_FEATURE_FLAGS: dict[str, tuple[str, ...]] = {
    "FP8 training": ("--fp8-format", "--fp8-recipe", "--transformer-impl"),
    "gated attention / hybrid layers (Qwen3-Next, Qwen3.5)": (
        "--use-gated-attention", "--attention-output-gate", "--apply-layernorm-1p", "--moe-shared-expert-gate"),
    "vision-language models": ("--multimodal-keys",),
    "prefill/decode disaggregation": ("--prefill-num-servers",),
    # slime accepts it only for DSA attention models (DeepSeek-V3.2, GLM-5.1): slime/backends/megatron_utils/
    # arguments.py _validate_allgather_cp_supported; rlrun builds no DSA layer
    "all-gather context parallelism (slime's, for DSA attention models only)": ("--allgather-cp",),
    # a no-op where Megatron's padded vocabulary equals the model's (slime_decode._vocab_padding); refused otherwise
    "Megatron vocab padding (a padded vocabulary larger than the model's)": ("--make-vocab-size-divisible-by",),
    "custom model specs": ("--spec", "--custom-config-path", "--model-name"),
    # slime's server groups (slime/backends/sglang_utils/sglang_config.py): prefill/decode/encoder/placeholder
    # workers with their own GPU counts and ServerArgs overrides, several models; rlrun runs one engine group
    "SGLang server-group config files (prefill/decode groups, several models)": ("--sglang-config",),
}
FEATURE_OF: dict[str, str] = {f: feature for feature, flags in _FEATURE_FLAGS.items() for f in flags}
