#!/bin/bash
# --num-epoch 2 instead of --num-rollout, over a prompt file of 72 rows (base/prompts.jsonl)
# slime: runs (72 // 32) x 2 = 4 rollouts (slime/ray/placement_group.py: num_rollout from num_epoch)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --num-rollout ] || [ "$a" = --prompt-data ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
ROLLOUT_ARGS+=(--prompt-data "${CATALOGUE_DIR}/base/prompts.jsonl" --num-epoch 2)
source "${CATALOGUE_DIR}/base/launch.sh"
