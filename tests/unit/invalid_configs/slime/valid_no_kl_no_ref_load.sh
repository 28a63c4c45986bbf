#!/bin/bash
# no KL at all (no --use-kl-loss, no --kl-coef) and no --ref-load
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --ref-load ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${GRPO_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --use-kl-loss ]; then skip=0; continue; fi; KEPT+=("$a"); done; GRPO_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
