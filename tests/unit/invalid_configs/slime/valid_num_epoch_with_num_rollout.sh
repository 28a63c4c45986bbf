#!/bin/bash
# --num-epoch 3 next to --num-rollout 3000
# slime: --num-epoch is ignored (logged)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--num-epoch 3)
source "${CATALOGUE_DIR}/base/launch.sh"
