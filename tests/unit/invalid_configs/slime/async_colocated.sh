#!/bin/bash
# train_async.py with the seed's --colocate
# slime: train_async.py asserts 'Colocation is not supported for async training.'
# expect: validate train.async_train
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray job submit --address="http://127.0.0.1:8265" -- python3 train_async.py ${PLACEMENT_ARGS[@]} ${MODEL_ARGS[@]} \
   ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${OPTIMIZER_ARGS[@]} ${GRPO_ARGS[@]} ${PERF_ARGS[@]} ${EVAL_ARGS[@]} \
   ${SGLANG_ARGS[@]} ${MISC_ARGS[@]}
