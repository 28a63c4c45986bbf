#!/bin/bash
# --num-query-groups 8 without --group-query-attention (Megatron builds 32-head MHA)
# slime: Megatron trains 32 KV heads; the HF checkpoint has 8: loading the weights fails
# expect: validate model.num_query_groups
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS=(
   --num-layers 36
   --hidden-size 2560
   --ffn-hidden-size 9728
   --swiglu
   --num-attention-heads 32
   --num-query-groups 8
   --kv-channels 128
   --qk-layernorm
   --use-rotary-position-embeddings
   --rotary-base 1000000
   --normalization "RMSNorm"
   --norm-epsilon 1e-6
   --disable-bias-linear
   --vocab-size 151936
)
source "${CATALOGUE_DIR}/base/launch.sh"
