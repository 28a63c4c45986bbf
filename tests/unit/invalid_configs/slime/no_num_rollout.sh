#!/bin/bash
# neither --num-rollout nor --num-epoch
# slime: slime_validate_args asserts num_rollout is set when num_epoch is not
# expect: slime rollout.num_rollout
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --num-rollout ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
