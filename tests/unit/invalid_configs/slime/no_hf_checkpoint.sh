#!/bin/bash
# no --hf-checkpoint
# slime: no tokenizer and no SGLang model path (hf_checkpoint None)
# expect: slime checkpoint.hf
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --hf-checkpoint ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
