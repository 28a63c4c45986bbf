#!/bin/bash
# --save-interval 20 without --save
# slime: slime_validate_args asserts '--save' is required when save_interval is set
# expect: slime checkpoint.save
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --save ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --load ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
