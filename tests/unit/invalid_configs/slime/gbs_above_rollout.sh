#!/bin/bash
# --global-batch-size 512 with 32 prompts x 8 samples = 256 samples per rollout
# slime: 256 // 512 = 0 steps: the first train step asserts num_rollouts (256) < global_batch_size (512) (slime/utils/dp_schedule.py)
# expect: validate train.global_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--global-batch-size 512)
source "${CATALOGUE_DIR}/base/launch.sh"
