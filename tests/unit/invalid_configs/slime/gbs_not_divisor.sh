#!/bin/bash
# --global-batch-size 96 does not divide 256 samples per rollout
# slime: 2 steps of 96; the trailing 64 samples of every rollout are dropped silently
# expect: validate train.global_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--global-batch-size 96)
source "${CATALOGUE_DIR}/base/launch.sh"
