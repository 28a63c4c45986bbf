#!/bin/bash
# no --prompt-data
# slime: no dataset is built (slime/rollout/data_source.py)
# expect: slime data.prompt_data
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --prompt-data ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
