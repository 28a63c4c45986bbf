#!/bin/bash
# no --rollout-max-response-len
# slime: SGLang gets max_new_tokens=None; the first request fails with a TypeError (slime/rollout/sglang_rollout.py generate: max_new_tokens -= response_length)
# expect: slime rollout.max_response_len
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${ROLLOUT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --rollout-max-response-len ]; then skip=1; continue; fi; KEPT+=("$a"); done; ROLLOUT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
