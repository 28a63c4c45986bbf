#!/bin/bash
# --use-dynamic-batch-size without --max-tokens-per-gpu
# slime: slime_validate_args asserts max_tokens_per_gpu must be set
# expect: validate train.max_tokens_per_gpu
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS=(
   --tensor-model-parallel-size 2
   --sequence-parallel
   --recompute-granularity full
   --recompute-method uniform
   --recompute-num-layers 1
   --use-dynamic-batch-size
)
source "${CATALOGUE_DIR}/base/launch.sh"
