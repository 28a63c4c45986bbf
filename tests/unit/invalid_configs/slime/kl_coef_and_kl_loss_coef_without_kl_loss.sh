#!/bin/bash
# --kl-coef 0.01 and --kl-loss-coef 0.01 without --use-kl-loss
# slime: slime_validate_args asserts 'Only one of kl_coef and kl_loss_coef can be set' (whether or not --use-kl-loss)
# expect: validate algo.kl_coef
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${GRPO_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --use-kl-loss ]; then skip=0; continue; fi; KEPT+=("$a"); done; GRPO_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${GRPO_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --kl-loss-coef ]; then skip=1; continue; fi; KEPT+=("$a"); done; GRPO_ARGS=("${KEPT[@]}")
GRPO_ARGS+=(--kl-loss-coef 0.01 --kl-coef 0.01)
source "${CATALOGUE_DIR}/base/launch.sh"
