#!/bin/bash
# --balance-by-flops without --use-dynamic-batch-size
# slime: slime_validate_args asserts --balance-by-flops requires --use-dynamic-batch-size
# expect: import --balance-by-flops
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${PERF_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --use-dynamic-batch-size ]; then skip=0; continue; fi; KEPT+=("$a"); done; PERF_ARGS=("${KEPT[@]}")
KEPT=(); skip=0; for a in "${PERF_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --max-tokens-per-gpu ]; then skip=1; continue; fi; KEPT+=("$a"); done; PERF_ARGS=("${KEPT[@]}")
PERF_ARGS+=(--balance-by-flops)
source "${CATALOGUE_DIR}/base/launch.sh"
