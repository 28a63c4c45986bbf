"""Resolved rlrun config sections -> megatron-core TransformerConfig and GPTModel.

Every architecture flag comes from `model.*` (the same section the torch backend turns into a
transformers config), every layout from `parallelism.*`, and memory/speed switches from
`train.*`; nothing is read from environment variables or defaults hidden here.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rlrun.config.families import FAMILIES
from rlrun.train.megatron import kernels, passthrough, rope

# Fused SwiGLU and bias-dropout-add through megatron-core's jit_fuser (torch.compile). Off: on
# one H100 (Qwen3-1.7B shape, seq 4096) they saved 2.6 GiB but made fwd+bwd 30 ms slower
# (0.221 -> 0.251 s; docs/benchmarks.md). A module switch, not a config key, so the step
# profiler (tools/device/profile_step.py) can measure both.
TORCH_COMPILE_FUSIONS = False

# model.family -> rope flavour megatron-core must use to match the HF implementation of that family.
# (from the one registry, rlrun.config.families: Family.interleaved_rope)
_INTERLEAVED_ROPE = {name: f.interleaved_rope for name, f in FAMILIES.items() if f.interleaved_rope is not None}


def transformer_config(model, parallelism, train=None, *, dtype=torch.bfloat16, cpu_init: bool = False,
                       routing_replay: bool = False):
    """megatron-core TransformerConfig for `model` under `parallelism` (and `train`'s recompute and
    fusion switches when given; None = inference/verification use, nothing recomputed). routing_replay:
    every MoE router gets megatron-core's RouterReplay (rollout.routing_replay; rlrun.train.megatron.routing)."""
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    if model.family not in _INTERLEAVED_ROPE:
        raise ValueError(f"model.family={model.family!r} is not built by the megatron backend yet; "
                         f"supported: {', '.join(_INTERLEAVED_ROPE)}")
    if not model.swiglu:
        raise ValueError("model.swiglu=false: only gated-SiLU MLPs are mapped (every supported family uses them)")
    kw = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads, num_query_groups=model.num_query_groups,
        kv_channels=model.head_dim, normalization="RMSNorm", layernorm_epsilon=model.norm_epsilon,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, add_qkv_bias=model.add_qkv_bias,
        qk_layernorm=model.qk_layernorm, rotary_interleaved=_INTERLEAVED_ROPE[model.family],
        hidden_dropout=0.0, attention_dropout=0.0,
        # Rope and softmax fusions are TE/Apex kernels we do not have; the two others are compiled.
        apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=TORCH_COMPILE_FUSIONS, bias_activation_fusion=TORCH_COMPILE_FUSIONS,
        bf16=dtype == torch.bfloat16, params_dtype=dtype, pipeline_dtype=dtype,
        use_cpu_initialization=cpu_init,
        tensor_model_parallel_size=parallelism.tp, pipeline_model_parallel_size=parallelism.pp,
        context_parallel_size=parallelism.cp, expert_model_parallel_size=parallelism.ep,
        sequence_parallel=bool(parallelism.sequence_parallel and parallelism.tp > 1),
        # Packed micro-batches change length from one to the next; PP must exchange shapes.
        variable_seq_lengths=parallelism.pp > 1, deallocate_pipeline_outputs=True,
        moe_token_dispatcher_type=passthrough.DEFAULT_DISPATCHER,  # alltoall: accepts variable lengths
        gradient_accumulation_fusion=False,
    )
    if model.moe is not None:
        kw.update(_moe_kwargs(model.moe, routing_replay))
    mtp_layers = getattr(model, "mtp_num_layers", 0)  # a model section from before MTP (tests' shapes): none
    if mtp_layers:
        # megatron-core's MTP block on the last pipeline stage (rlrun.train.megatron.mtp runs it and computes its loss)
        kw.update(mtp_num_layers=mtp_layers,
                  mtp_loss_scaling_factor=train.mtp.loss_scaling_factor if train is not None else 0.1)
    cls = TransformerConfig
    if model.mla is not None:
        cls = MLATransformerConfig
        kw.update(_mla_kwargs(model))
    if train is not None:
        rc = train.recompute
        kw.update(recompute_granularity=rc.granularity, recompute_method=rc.method, recompute_num_layers=rc.num_layers)
        # The wgrad GEMM accumulates into the fp32 main grads (Apex's kernel or torch's addmm with
        # out_dtype, rlrun.train.megatron.wgrad.install, which the backend runs before the build).
        kw["gradient_accumulation_fusion"] = bool(train.gradient_accumulation_fusion)
        # train.megatron: megatron-core's own fields, unchanged (validated by passthrough.check_config); they
        # replace the constants above (e.g. moe_token_dispatcher_type, moe_router_load_balancing_type)
        kw.update(passthrough.to_core(cls.__name__, train.megatron))
    config = cls(**kw)
    # Set after validation, which would ask for Transformer Engine's kernels: rope without host
    # syncs (rope.py) and the SwiGLU kernel (kernels.py) fill the "fused" slots instead.
    rope.install(config)
    if not TORCH_COMPILE_FUSIONS and kernels.install_swiglu():
        config.bias_activation_fusion = True
    return config


def _moe_kwargs(moe, routing_replay: bool) -> dict:
    kw = dict(num_moe_experts=moe.num_experts, moe_router_topk=moe.top_k, moe_ffn_hidden_size=moe.expert_ffn_hidden_size,
              moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0, moe_router_dtype="fp32",
              moe_grouped_gemm=False,
              expert_tensor_parallel_size=1,  # experts whole on each rank (slime: --expert-tensor-parallel-size 1)
              moe_shared_expert_intermediate_size=moe.shared_expert_ffn_hidden_size or None,
              moe_enable_routing_replay=routing_replay)
    if moe.router == "softmax":
        # Qwen3-MoE: softmax over all experts, top-k, renormalise (norm_topk_prob) ==
        # megatron's softmax over the top-k logits (moe_router_pre_softmax=False).
        kw.update(moe_router_pre_softmax=False)
    else:
        # DeepSeek-V3 (noaux_tc): sigmoid scores; experts picked by score + e_score_correction_bias (megatron-core's
        # expert_bias buffer, loaded from the checkpoint), in the top `topk_group` of `n_group` groups ranked by the
        # sum of their top-(top_k / topk_group) scores (HF: top-2; model_rules.check refuses another ratio); weights
        # = the picked sigmoid scores renormalised (norm_topk_prob), times routed_scaling_factor
        # (train.megatron.moe_router_topk_scaling_factor). The bias stays the checkpoint's (update rate 0, as
        # slime's scripts run it) unless train.megatron.moe_router_bias_update_rate says otherwise.
        kw.update(moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
                  moe_router_bias_update_rate=0.0)
        if moe.n_group > 1:
            kw.update(moe_router_num_groups=moe.n_group, moe_router_group_topk=moe.topk_group)
    return kw


def _mla_kwargs(model) -> dict:
    """megatron-core's MLATransformerConfig fields from model.mla (DeepSeek-V3's q_lora_rank, kv_lora_rank,
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim) and the rope: YaRN where model.rope_scaling_factor != 1 (its
    mscale, mscale_all_dim, original_max_position_embeddings, beta_fast/slow: train.megatron, megatron-core's
    defaults otherwise; model_rules.check compares them with the checkpoint's config.json)."""
    a = model.mla
    if model.rotary_percent != 1.0:
        raise ValueError("model.rotary_percent != 1 with model.mla: MLA ropes the qk_rope_head_dim part whole")
    yarn = model.rope_scaling_factor != 1.0
    return dict(multi_latent_attention=True, q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
                qk_head_dim=a.qk_nope_head_dim, qk_pos_emb_head_dim=a.qk_rope_head_dim, v_head_dim=a.v_head_dim,
                # megatron-core's MLA rope de-interleaves the rope half as HF's DeepSeek-V3 does (rope_interleave)
                rotary_interleaved=False, rope_type="yarn" if yarn else "rope", rotary_base=model.rotary_base,
                rotary_percent=1.0, rotary_scaling_factor=model.rope_scaling_factor)


def init_parallel(parallelism, seed: int, moe: bool = False) -> None:
    """megatron-core's TP/PP/CP/EP groups over the already-initialised default process group
    (moe: the model has expert layers, whose weights are not TP-split)."""
    from megatron.core import parallel_state, tensor_parallel

    if not torch.distributed.is_initialized():
        raise RuntimeError("init_parallel: torch.distributed must be initialised first (the backend does it)")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=parallelism.tp, pipeline_model_parallel_size=parallelism.pp,
            context_parallel_size=parallelism.cp, expert_model_parallel_size=parallelism.ep,
            # MoE: experts whole on each rank (ETP 1, as slime runs them); dense: megatron's default
            expert_tensor_parallel_size=1 if moe else None,
            # Nothing here needs CPU collectives; gloo groups only add a socket rendezvous that
            # can hang on hosts whose hostname does not resolve to a reachable interface.
            create_gloo_process_groups=False)
    if torch.cuda.is_available():
        tensor_parallel.model_parallel_cuda_manual_seed(seed)


def without_mtp(config):
    """`config` for a model that only scores tokens (the reference, the teacher): no MTP block (model.mtp_num_layers
    is the actor's), so build_gpt builds megatron-core's plain GPTModel."""
    import copy
    if not config.mtp_num_layers:
        return config
    out = copy.copy(config)  # megatron-core's config objects are plain dataclasses; nothing of it is re-derived
    out.mtp_num_layers = None
    return out


def build_gpt(model, config, *, vp_stage=None):
    """The GPTModel of this rank's pipeline stage, on the current device, in config.params_dtype. config.mtp_num_layers
    (model.mtp_num_layers): rlrun.train.megatron.mtp's GPTModel with megatron-core's MTP block on the last stage."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    from rlrun.train.megatron.layer_spec import block_spec, mtp_block_spec
    from rlrun.train.megatron.mtp import MTPGPTModel

    tp = config.tensor_model_parallel_size
    if model.vocab_size % tp:
        raise ValueError(f"model.vocab_size={model.vocab_size} is not divisible by parallelism.tp={tp}; "
                         "the vocab-parallel embedding needs equal shards (padding would change the softmax)")
    first_k_dense = model.moe.first_k_dense if model.moe is not None else 0
    # model.mtp_num_layers: megatron-core's MTP block (this rank builds it on the last pipeline stage only)
    mtp = bool(config.mtp_num_layers)
    spec = dict(mtp_block_spec=mtp_block_spec(config, post_norms=model.post_norms, vp_stage=vp_stage)) if mtp else {}
    return (MTPGPTModel if mtp else GPTModel)(
        config=config, **spec,
        transformer_layer_spec=block_spec(config, post_norms=model.post_norms, first_k_dense=first_k_dense,
                                          vp_stage=vp_stage),
        vocab_size=model.vocab_size, max_sequence_length=model.max_position_embeddings,
        pre_process=parallel_state.is_pipeline_first_stage(), post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=model.tie_word_embeddings, parallel_output=True,
        # MLA builds its own (YaRN) rope inside the attention; GPTModel's rope is skipped for it
        position_embedding_type="rope", rotary_percent=model.rotary_percent, rotary_base=int(model.rotary_base),
        rope_scaling=model.rope_scaling_factor != 1.0, rope_scaling_factor=model.rope_scaling_factor,
    )
