#!/bin/bash
# --num-steps-per-rollout 1 beside --global-batch-size 256 (they agree)
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--num-steps-per-rollout 1)
source "${CATALOGUE_DIR}/base/launch.sh"
