#!/bin/bash
# no --rollout-batch-size
# slime: argparse: the argument --rollout-batch-size is required
# expect: slime rollout.rollout_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --rollout-batch-size ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
