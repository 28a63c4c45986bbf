"""The transformer block spec of the `megatron` backend: megatron-core's local modules with the
norm, post-norm and attention of layers.py plugged into the same slots.

Transformer Engine is not used even where it is installed: one code path, the same on the lent
GPUs (no TE wheel for their torch) and on AMD machines without TE.
"""
from __future__ import annotations

from dataclasses import fields

from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.backends import LocalSpecProvider
from megatron.core.models.gpt.gpt_layer_specs import get_mlp_module_spec_for_backend
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer import multi_latent_attention as _mla_module
from megatron.core.transformer.multi_latent_attention import MLASelfAttention, MLASelfAttentionSubmodules
from megatron.core.transformer.multi_token_prediction import MultiTokenPredictionBlockSubmodules, \
    MultiTokenPredictionLayer, MultiTokenPredictionLayerSubmodules, get_mtp_num_layers_to_build
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules, \
    get_transformer_layer_offset

from rlrun.train.megatron.layers import PostNormRowParallelLinear, RMSNorm, SDPAttention


class RlrunSpecProvider(LocalSpecProvider):
    """LocalSpecProvider with SP-capable RMSNorm, SDPA attention and (GLM-4) post-norms."""

    def __init__(self, post_norms: bool = False):
        self.post_norms = post_norms

    def row_parallel_linear(self):
        return PostNormRowParallelLinear if self.post_norms else super().row_parallel_linear()

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual: bool = False):
        if not rms_norm:
            raise ValueError("rlrun's megatron layer spec implements RMSNorm only (every supported family uses it)")
        return RMSNorm

    def core_attention(self):
        return SDPAttention


class SpecifiedMLASelfAttention(MLASelfAttention):
    """megatron-core's MLASelfAttention building exactly the norms and linears its spec names. megatron-core >= 0.19
    re-resolves them from config.qk_layernorm (QKNormConfigResolver): with q_lora_rank null it wants a q norm fused
    into linear_q_proj (Transformer Engine's layer-norm linear, which the local spec lacks; HF's DeepSeek-V3 without
    q LoRA, e.g. Moonlight, has no q norm at all) and refuses an explicit one. The spec below already says what HF's
    model has; 0.16 has no such hook and builds the spec as given."""

    def _resolve_qk_norm_config(self, submodules):
        return dict(linear_q_proj=submodules.linear_q_proj, linear_q_up_proj=submodules.linear_q_up_proj,
                    linear_kv_up_proj=submodules.linear_kv_up_proj, q_layernorm=submodules.q_layernorm,
                    kv_layernorm=submodules.kv_layernorm)


def _attention(config, backend, norm) -> ModuleSpec:
    """Self-attention: grouped-query (one fused linear_qkv) or, for model.mla, megatron-core's multi-latent attention
    with the submodules of its local spec (get_gpt_layer_local_spec(multi_latent_attention=True)): the q and kv
    down projections, their RMSNorms (q_layernorm, kv_layernorm: HF's q_a_layernorm, kv_a_layernorm; model.
    qk_layernorm) and the up projections, all megatron-core's column-parallel linears."""
    qk_norm = norm if config.qk_layernorm else IdentityOp
    if config.multi_latent_attention:
        # Without Transformer Engine megatron-core stands a MagicMock in for `te`, its TE classes import as mocks and
        # multi_latent_attention's HAVE_TE (set by that import succeeding) stays True: MLA's constructor then runs
        # isinstance(linear_proj, <mock>) and raises. Its flag follows the extension's own HAVE_TE instead.
        from megatron.core.extensions import transformer_engine as te_ext
        if not te_ext.HAVE_TE:
            _mla_module.HAVE_TE = False
        linear = backend.column_parallel_linear()
        return ModuleSpec(module=SpecifiedMLASelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                          submodules=MLASelfAttentionSubmodules(
                              linear_q_proj=linear, linear_q_down_proj=linear, linear_q_up_proj=linear,
                              linear_kv_down_proj=linear, linear_kv_up_proj=linear,
                              core_attention=backend.core_attention(), linear_proj=backend.row_parallel_linear(),
                              # no q LoRA: no q norm (HF's q_proj reads the layer's normed input)
                              q_layernorm=qk_norm if config.q_lora_rank is not None else IdentityOp,
                              kv_layernorm=qk_norm))
    return ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                      submodules=SelfAttentionSubmodules(
                          linear_qkv=backend.column_parallel_linear(), core_attention=backend.core_attention(),
                          linear_proj=backend.row_parallel_linear(), q_layernorm=qk_norm, k_layernorm=qk_norm))


def _layer_spec(config, moe: bool, post_norms: bool) -> ModuleSpec:
    if moe and post_norms:
        raise ValueError("model.post_norms with MoE layers is not implemented in the megatron layer spec")
    backend = RlrunSpecProvider(post_norms=post_norms)
    norm = backend.layer_norm(rms_norm=True)
    mlp = get_mlp_module_spec_for_backend(backend=backend, num_experts=config.num_moe_experts if moe else None,
                                          moe_grouped_gemm=False)
    return ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
        input_layernorm=norm,
        self_attention=_attention(config, backend, norm),
        self_attn_bda=get_bias_dropout_add,
        pre_mlp_layernorm=norm,
        mlp=mlp,
        mlp_bda=get_bias_dropout_add,
    ))


def block_spec(config, post_norms: bool, first_k_dense: int = 0, vp_stage=None) -> TransformerBlockSubmodules:
    """Layer specs of this pipeline stage (dense for the first `first_k_dense` global layers
    when the model has experts) and the final norm."""
    n = get_num_layers_to_build(config, vp_stage=vp_stage)
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    moe = config.num_moe_experts is not None
    dense = _layer_spec(config, moe=False, post_norms=post_norms)
    expert = _layer_spec(config, moe=True, post_norms=post_norms) if moe else None
    layers = [expert if moe and offset + i >= first_k_dense else dense for i in range(n)]
    return TransformerBlockSubmodules(layer_specs=layers, layer_norm=RMSNorm)


def mtp_block_spec(config, post_norms: bool, vp_stage=None) -> MultiTokenPredictionBlockSubmodules | None:
    """megatron-core's MTP block of config.mtp_num_layers layers (None on a stage that builds none: all of them sit on
    the last pipeline stage), each as get_mtp_layer_spec_for_backend makes it with rlrun's modules: enorm / hnorm /
    final layer_norm RMSNorms, the column-parallel eh_proj, and a transformer layer like the decoder's last one
    (an MoE layer when the model has experts: DeepSeek-V3's and GLM-4.x-MoE's MTP layer; dense otherwise: MiMo's).
    megatron-core 0.16 names that layer `transformer_layer`, 0.19 `mtp_model_layer` (also its parameters' names:
    rlrun.train.megatron.weights maps both)."""
    if get_mtp_num_layers_to_build(config, vp_stage=vp_stage) == 0:
        return None
    backend = RlrunSpecProvider(post_norms=post_norms)
    layer = _layer_spec(config, moe=config.num_moe_experts is not None, post_norms=post_norms)
    slot = "mtp_model_layer" if "mtp_model_layer" in {f.name for f in fields(MultiTokenPredictionLayerSubmodules)} \
        else "transformer_layer"
    spec = ModuleSpec(module=MultiTokenPredictionLayer, submodules=MultiTokenPredictionLayerSubmodules(
        enorm=RMSNorm, hnorm=RMSNorm, eh_proj=backend.column_parallel_linear(), layer_norm=RMSNorm, **{slot: layer}))
    return MultiTokenPredictionBlockSubmodules(layer_specs=[spec] * config.mtp_num_layers)
