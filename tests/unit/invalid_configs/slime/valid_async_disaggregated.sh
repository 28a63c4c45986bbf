#!/bin/bash
# train_async.py with 4 trainer + 4 rollout GPUs
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 4)
ray job submit --address="http://127.0.0.1:8265" -- python3 train_async.py ${PLACEMENT_ARGS[@]} ${MODEL_ARGS[@]} \
   ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${OPTIMIZER_ARGS[@]} ${GRPO_ARGS[@]} ${PERF_ARGS[@]} ${EVAL_ARGS[@]} \
   ${SGLANG_ARGS[@]} ${MISC_ARGS[@]}
