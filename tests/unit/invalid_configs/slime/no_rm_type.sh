#!/bin/bash
# no --rm-type (and no custom reward)
# slime: NotImplementedError('Rule-based RM type is not specified.') at the first reward (slime/rollout/rm_hub/__init__.py)
# expect: slime data.rm_type
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --rm-type ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
