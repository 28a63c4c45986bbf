"""The sglang engine kind's spec (pure: rlrun plan reads it): `python -m sglang.launch_server` per engine, any
number of GPUs and nodes per engine, a static memory pool (mem_fraction_static), each TP rank takes its own copy
of a push, no checksum endpoint (a push is verified by the weight_version every engine reports). Its arguments
are rollout.sglang (SGLang's ServerArgs, slime's vocabulary), checked against the pinned ServerArgs (args.py),
and its rules are SGLang's DP/PP layout below."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import ENGINES, EngineKind
from rlrun.config.memory import FP8_BLOCK
from rlrun.rollout.engines.sglang.args import check_sglang_mapping, requires
# registers the sglang_router router kind: SGLang's router, in front of any engine kind (the hf engine's too)
from rlrun.rollout.engines.sglang.router import spec as _router_spec  # noqa: F401


def rules(cfg) -> Iterator[Problem]:
    r = cfg.rollout
    if r.args_of():
        yield from _sglang_dp(r)
        yield from _sglang_pp(r)
    yield from _sglang_fp8(cfg)
    yield from _sglang_tied_head(cfg)
    yield from _sglang_fused_rope_kv(cfg)


# model.family values whose SGLang 0.5.16 model class builds lm_head as a parameter of its own and never ties it to
# embed_tokens, whatever config.json's tie_word_embeddings says (sglang/srt/models/qwen3_moe.py
# Qwen3MoeForCausalLM: a ParallelLMHead, no tie_word_embeddings branch; qwen3.py, llama.py, qwen2.py, glm4.py and
# deepseek_v2.py tie). A tied checkpoint has no lm_head.weight and rlrun's weight sync sends none, so that head is
# never loaded: measured on an H200, every log-prob the engine returned was -ln(vocab_size) (uniform logits).
UNTIED_HEAD_FAMILIES = frozenset({"qwen3_moe"})


def _sglang_tied_head(cfg) -> Iterator[Problem]:
    """model.tie_word_embeddings=true on a family whose SGLang model class has no tied head (UNTIED_HEAD_FAMILIES)."""
    m = cfg.model
    if m.tie_word_embeddings and m.family in UNTIED_HEAD_FAMILIES:
        yield Problem("model.tie_word_embeddings", f"SGLang's {m.family} model class keeps lm_head apart from "
                      "embed_tokens and never ties them: a tied model's head would never be loaded (the engine "
                      "would serve uniform logits, every log-prob -ln(vocab_size))", "set "
                      "model.tie_word_embeddings=false (released Qwen3-MoE checkpoints are untied), or "
                      "rollout.engine=hf", True)


# model.family values whose SGLang 0.5.16 model class writes the KV cache inside its rotary embedding on CUDA when
# the KV pool is bf16 (sglang/srt/models/qwen3_moe.py apply_qk_norm_rope: fused_set_kv_buffer_arg, models/utils.py
# enable_fused_set_kv_buffer), and whose rotary embedding asserts "save kv cache is not supported for
# fallback_rotary_embedding" for a head_dim outside FUSED_ROPE_HEAD_DIMS (layers/rotary_embedding/base.py: only
# those sizes get the fused kernel). Seen on an H200: model=tiny-moe (head_dim 16) crashed every engine at its first
# forward once the engines served bf16.
FUSED_ROPE_KV_FAMILIES = frozenset({"qwen3_moe"})
FUSED_ROPE_HEAD_DIMS = (64, 128, 256, 512)


def _sglang_fused_rope_kv(cfg) -> Iterator[Problem]:
    """A FUSED_ROPE_KV_FAMILIES model on CUDA with a bf16 KV pool (kv_cache_dtype bf16, or auto with the bf16
    weights rlrun serves: dtype auto or bfloat16) and a head_dim SGLang's fused rope kernel lacks."""
    m, args = cfg.model, cfg.rollout.args_of() or {}
    kv, dtype = args.get("kv_cache_dtype", "auto"), args.get("dtype", "auto")
    bf16_pool = kv in ("bf16", "bfloat16") or (kv == "auto" and dtype in ("auto", "bfloat16"))
    if (cfg.hardware.vendor == "cuda" and m.family in FUSED_ROPE_KV_FAMILIES and m.mla is None and bf16_pool
            and m.head_dim not in FUSED_ROPE_HEAD_DIMS):
        yield Problem("model.head_dim", f"SGLang's {m.family} model class writes the bf16 KV cache inside its rotary "
                      f"embedding on CUDA, which has a kernel only for head_dim {', '.join(map(str, FUSED_ROPE_HEAD_DIMS))}"
                      f"; with {m.head_dim} every engine fails at its first forward (\"save kv cache is not supported "
                      "for fallback_rotary_embedding\")", f"set model.head_dim to one of "
                      f"{', '.join(map(str, FUSED_ROPE_HEAD_DIMS))}, or rollout.sglang.kv_cache_dtype=fp8_e4m3 (an FP8 "
                      "KV cache takes the unfused path), or rollout.engine=hf", m.head_dim)


def _sglang_fp8(cfg) -> Iterator[Problem]:
    """rollout.fp8 on SGLang: its block-wise FP8 linear layers (Fp8LinearMethod.validate_block_quant_shapes, 0.5.16)
    refuse a fused projection (qkv_proj, gate_up_proj) whose output parts are not multiples of the 128-row block on
    each tensor-parallel rank, and a row-parallel input (o_proj, down_proj) that is not, with tp > 1; the parts
    are the query (heads x head_dim / tp), key/value (max(kv heads / tp, 1) x head_dim: SGLang replicates kv heads
    beyond their count) and MLP (ffn_hidden_size / tp) widths. Dense models only: rlrun's rules refuse MoE."""
    r, m = cfg.rollout, cfg.model
    if not r.fp8 or m.moe is not None or m.mla is not None:
        return
    pp = (r.args_of() or {}).get("pp_size", 1)
    tp = r.gpus_per_engine // pp if isinstance(pp, int) and not isinstance(pp, bool) and pp > 0 and \
        r.gpus_per_engine % pp == 0 else r.gpus_per_engine
    parts = {"the query projection (num_attention_heads x head_dim)": m.num_attention_heads * m.head_dim / tp,
             "the key/value projections (num_query_groups x head_dim)": max(m.num_query_groups // tp, 1) * m.head_dim,
             "the MLP (ffn_hidden_size)": m.ffn_hidden_size / tp}
    bad = [f"{what}: {v:g}" for what, v in parts.items() if v % FP8_BLOCK]
    if bad:
        yield Problem("rollout.fp8", f"SGLang's block-wise FP8 layers need every part of a fused projection to be a "
                      f"multiple of {FP8_BLOCK} rows on each tensor-parallel rank (tp {tp}); not so for "
                      f"{'; '.join(bad)}", f"set rollout.fp8=false, or a rollout.gpus_per_engine that keeps them "
                      f"multiples of {FP8_BLOCK}", True)


def _sglang_pp(r) -> Iterator[Problem]:
    """SGLang's pp_size: an engine of rollout.gpus_per_engine GPUs runs pp_size pipeline stages of
    gpus_per_engine / pp_size tensor-parallel GPUs (rlrun.rollout.engines.sglang.args.server_args, as slime's
    sglang_utils/arguments.py validate_args sets sglang_tp_size), so pp_size must divide gpus_per_engine."""
    pp, gpus = r.args_of().get("pp_size", 1), r.gpus_per_engine
    if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1 and gpus % pp:
        yield Problem("rollout.sglang.pp_size", f"an engine's {gpus} GPUs (rollout.gpus_per_engine) do not split "
                      f"into {pp} pipeline stages (slime asserts rollout_num_gpus_per_engine % sglang_pp_size == 0)",
                      f"use a pp_size that divides {gpus}, or rollout.gpus_per_engine a multiple of {pp}", pp)


def _sglang_dp(r) -> Iterator[Problem]:
    """SGLang's dp_size: without enable_dp_attention a server runs dp_size replicas of tp_size GPUs each
    (dp * tp GPUs), but rlrun gives an engine rollout.gpus_per_engine (its tp_size) GPUs and puts replicas
    behind the router itself; with enable_dp_attention the dp_size attention groups split the tp_size GPUs,
    so dp_size must divide tp_size."""
    dp, tp = r.args_of().get("dp_size", 1), r.gpus_per_engine
    if not isinstance(dp, int) or isinstance(dp, bool) or dp <= 1:
        return
    if not r.args_of().get("enable_dp_attention", False):
        yield Problem("rollout.sglang.dp_size", f"dp_size {dp} without enable_dp_attention makes each engine "
                      f"{dp} replicas of {tp} GPUs ({dp * tp} GPUs), but an engine gets rollout.gpus_per_engine "
                      f"= {tp}", f"remove rollout.sglang.dp_size (rlrun runs rollout.num_gpus / gpus_per_engine "
                      "engines behind the router: raise rollout.num_gpus for more replicas), or set "
                      "rollout.sglang.enable_dp_attention=true (DP attention inside one engine)", dp)
    elif tp % dp:
        yield Problem("rollout.sglang.dp_size", f"with enable_dp_attention the {dp} attention DP groups split the "
                      f"engine's {tp} GPUs (tp_size = rollout.gpus_per_engine), and {dp} does not divide {tp}",
                      f"use a dp_size that divides {tp}", dp)


SPEC = ENGINES.register(EngineKind("sglang", needs_gpu=True, args_key="sglang", args_check=check_sglang_mapping,
                                   args_requires=requires, judge=True,
                                   prompt_logprobs=True, probe_path="/model_info",
                                   seeded=lambda args: bool(args.get("enable_deterministic_inference")),
                                   rules=rules, sharded_weights=True, multi_node=True, memory="static_pool",
                                   # NCCL: verified on two GPUs (tests/gpu/test_sglang_nccl_sync.py); the flattened
                                   # CUDA-IPC form on one H200 (tests/gpu/test_sglang_flattened_sync.py, 2026-11-28
                                   # and -29: log-probs after the push within 0.0234 of transformers; 0.6B at 33.5
                                   # GB/s against 20.3 per tensor; docs/rollout.md)
                                   flattened_broadcast=True, flattened_ipc=True, routed_experts=True, fp8=True,
                                   mtp_weights=True,
                                   # a LoRA run pushes the merged weights under the HF names: the same push as
                                   # full fine-tuning's (docs/algorithms.md "LoRA")
                                   lora=True,
                                   nccl_env={"NCCL_CUMEM_ENABLE": "0"},
                                   start="rlrun.rollout.engines.sglang.engine:start", packages=("sglang",),
                                   requires=(("sglang", "pip install 'rlrun[sglang]' (docs/sglang.md)"),)))
