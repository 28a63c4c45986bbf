"""Layers that megatron-core's local spec lacks without Transformer Engine or Apex.

- `RMSNorm`: torch's fused RMSNorm that also works under sequence parallelism. megatron-core's
  WrappedTorchNorm refuses sequence_parallel; the only thing SP needs from a norm is that its
  weight is marked `sequence_parallel` so finalize_model_grads all-reduces its grad over TP.
  (q/k norms need the same TP all-reduce; finalize_model_grads does it by their names.)
- `PostNormRowParallelLinear`: RowParallelLinear followed by an RMSNorm of its (reduced) output.
  GLM-4 normalises the attention and MLP outputs before the residual add
  (post_self_attn_layernorm, post_mlp_layernorm); putting the norm at the end of linear_proj /
  linear_fc2 gives exactly that without forking TransformerLayer.
- `SDPAttention`: core attention through PyTorch's fused kernels. megatron-core's local
  DotProductAttention materialises the [b, heads, s, s] score matrix (the 81 GB / 104 TFLOP/s
  baseline in docs/benchmarks.md); this module calls flash/cuDNN attention instead, and runs
  packed variable-length micro-batches (THD) through torch's varlen flash attention.
"""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel import RowParallelLinear
from megatron.core.transformer.module import MegatronModule

from rlrun.train.megatron import kernels
from rlrun.train.megatron.weights import ADAPTER_MODULE


class RMSNorm(torch.nn.RMSNorm):
    """Builder signature of megatron-core norms: (config=, hidden_size=, eps=). On the GPU the
    kernels of rlrun.train.megatron.kernels (Liger's RMSNorm), elsewhere torch's."""

    # The backward may write the input gradient over the output gradient: true wherever the
    # output feeds a linear layer or rope, false for a post-norm whose output meets the residual.
    grad_in_place = True

    def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_unused):
        super().__init__(hidden_size, eps=eps, device=_init_device(config), dtype=config.params_dtype)
        # finalize_model_grads all-reduces grads of params carrying this flag across TP.
        setattr(self.weight, "sequence_parallel", bool(config.sequence_parallel))

    def forward(self, x):
        if kernels.rms_norm_available(x):
            return kernels.rms_norm(x, self.weight, self.eps, self.grad_in_place)
        return super().forward(x)


class PostNormRowParallelLinear(RowParallelLinear):
    """RowParallelLinear whose output goes through an RMSNorm (GLM-4's post-sublayer norms)."""

    def __init__(self, input_size: int, output_size: int, *, config, **kwargs):
        super().__init__(input_size, output_size, config=config, **kwargs)
        if self.bias is not None:
            raise ValueError("PostNormRowParallelLinear: the norm must see the biased output; "
                             "GLM-4 has no output-projection bias (model.add_qkv_bias covers qkv only)")
        self.post_norm = RMSNorm(config, output_size, eps=config.layernorm_epsilon)
        self.post_norm.grad_in_place = False  # its output goes straight into the residual add

    def forward(self, input_):
        out, bias = super().forward(input_)
        adapter = getattr(self, ADAPTER_MODULE, None)  # model.lora: the adapter's output joins before the norm
        if adapter is not None:
            out = out + adapter(input_).to(out.dtype)
        return self.post_norm(out), bias


def _init_device(config):
    return "cpu" if config.use_cpu_initialization else torch.cuda.current_device()


def _varlen_attn():
    """torch's varlen flash attention and whether it takes `is_causal` (torch <= 2.11) or a
    window (newer); None when this torch lacks it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None, set()
    return varlen_attn, set(inspect.signature(varlen_attn).parameters)


class SDPAttention(MegatronModule):
    """Drop-in for megatron-core's core_attention slot (same constructor and forward).

    Inputs are [s, b, heads, d] (or [t, heads, d] for packed THD batches); output is
    [s, b, heads*d] (or [t, heads*d]). Causal attention only: that is what a decoder LM trains.
    """

    def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None,
                 softmax_scale=None, cp_comm_type=None, pg_collection=None, **_unused):
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError("parallelism.cp > 1 needs Transformer Engine's attention (ring exchange of K/V); "
                             "the SDPA attention of the local spec runs cp=1: set parallelism.cp=1")
        tp = config.tensor_model_parallel_size
        self.heads = config.num_attention_heads // tp
        self.groups = max(config.num_query_groups // tp, 1)
        self.scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(config.kv_channels)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self._varlen, self._varlen_params = _varlen_attn()

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if attention_bias is not None:
            raise ValueError("SDPAttention: attention_bias is not supported")
        p = self.dropout if self.training else 0.0
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            out = self._thd(query, key, value, packed_seq_params, p)
            return out.reshape(out.shape[0], -1)
        # [s, b, h, d] -> [b, h, s, d]; SDPA picks flash (bf16) or efficient/math (fp32).
        q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=self.scale,
                                             enable_gqa=k.shape[1] != q.shape[1])
        return out.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)

    def _thd(self, q, k, v, psp, p):
        cu_q, cu_k = psp.cu_seqlens_q, psp.cu_seqlens_kv
        if int(psp.max_seqlen_q) == q.shape[0] == k.shape[0]:
            # One sequence fills the micro-batch: the dense causal kernel. SDPA picks cuDNN's flash
            # attention on the H100, 2x torch's varlen (FA2) kernels there (15 vs 30 ms per step for
            # Qwen3-1.7B at 4096 tokens, docs/benchmarks.md). Read from host ints: no sync.
            qs, ks, vs = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
            out = F.scaled_dot_product_attention(qs, ks, vs, dropout_p=p, is_causal=True, scale=self.scale,
                                                 enable_gqa=ks.shape[1] != qs.shape[1])
            return out.squeeze(0).transpose(0, 1)
        fast = (self._varlen is not None and q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and p == 0.0)
        if fast:
            kw = {"scale": self.scale}
            if "is_causal" in self._varlen_params:
                kw["is_causal"] = True
            else:
                kw["window_size"] = (-1, 0)
            if k.shape[1] != q.shape[1]:
                if "enable_gqa" in self._varlen_params:
                    kw["enable_gqa"] = True
                else:  # older varlen kernels want equal head counts
                    rep = q.shape[1] // k.shape[1]
                    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            return self._varlen(q, k, v, cu_q.int(), cu_k.int(), int(psp.max_seqlen_q), int(psp.max_seqlen_kv), **kw)
        # Reference path (fp32 checks, CPU): one SDPA call per packed sequence.
        bounds = cu_q.tolist()
        outs = []
        for s, e in zip(bounds[:-1], bounds[1:]):
            qs, ks, vs = (x[s:e].transpose(0, 1).unsqueeze(0) for x in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs, dropout_p=p, is_causal=True, scale=self.scale,
                                               enable_gqa=ks.shape[1] != qs.shape[1])
            outs.append(o.squeeze(0).transpose(0, 1))
        return torch.cat(outs, dim=0)
