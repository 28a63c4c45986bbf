#!/bin/bash
# --over-sampling-batch-size 16 below --rollout-batch-size 32
# slime: asserts over_sampling_batch_size >= rollout_batch_size
# expect: validate rollout.over_sampling_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--over-sampling-batch-size 16)
source "${CATALOGUE_DIR}/base/launch.sh"
