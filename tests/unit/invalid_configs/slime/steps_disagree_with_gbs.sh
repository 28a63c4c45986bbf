#!/bin/bash
# --num-steps-per-rollout 2 beside --global-batch-size 256 (32 x 8 = 256 samples: 2 steps would be 128)
# slime: slime_validate_args asserts global_batch_size == rollout_batch_size * n_samples_per_prompt // num_steps_per_rollout
# expect: validate train.global_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--num-steps-per-rollout 2)
source "${CATALOGUE_DIR}/base/launch.sh"
