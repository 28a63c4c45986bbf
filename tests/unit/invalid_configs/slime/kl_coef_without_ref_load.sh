#!/bin/bash
# --kl-coef 0.01 (reward KL, no KL loss) without --ref-load
# slime: slime_validate_args: kl_coef != 0 needs ref_load (a TypeError for None)
# expect: slime checkpoint.ref
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --ref-load ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${GRPO_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --use-kl-loss ]; then skip=0; continue; fi; KEPT+=("$a"); done; GRPO_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${GRPO_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --kl-loss-coef ]; then skip=1; continue; fi; KEPT+=("$a"); done; GRPO_ARGS=("${KEPT[@]}")
GRPO_ARGS+=(--kl-coef 0.01)
source "${CATALOGUE_DIR}/base/launch.sh"
