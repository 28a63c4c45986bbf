#!/bin/bash
# Qwen2.5-0.5B's fields: q/k/v bias and no q/k norm define the qwen2 family (not qwen3, whatever group is closest)
# (--ref-load: the seed's --use-kl-loss needs one, or slime stops in slime_validate_args)
# expect: valid
# check: model.family = "qwen2"
# check: model.add_qkv_bias = true
# check: model.qk_layernorm = false
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
MODEL_ARGS=(--swiglu --num-layers 24 --hidden-size 896 --ffn-hidden-size 4864 --num-attention-heads 14
   --use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias --normalization "RMSNorm"
   --norm-epsilon 1e-6 --rotary-base 1000000 --group-query-attention --num-query-groups 2 --vocab-size 151936
   --kv-channels 64)
CKPT_ARGS=(--hf-checkpoint /nowhere/Qwen2.5-0.5B --ref-load /nowhere/Qwen2.5-0.5B_torch_dist --save /nowhere/out)
PERF_ARGS+=(--tensor-model-parallel-size 1 --max-tokens-per-gpu 16384)
source "${HERE}/launch.sh"
