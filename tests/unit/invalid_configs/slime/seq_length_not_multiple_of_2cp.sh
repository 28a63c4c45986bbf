#!/bin/bash
# --context-parallel-size 2 with --seq-length 4098
# slime: Megatron validate_args asserts seq-length is a multiple of 2 * context-parallel-size
# expect: slime parallelism.cp
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${PERF_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --context-parallel-size ]; then skip=1; continue; fi; KEPT+=("$a"); done; PERF_ARGS=("${KEPT[@]}")
PERF_ARGS+=(--context-parallel-size 2)
MODEL_ARGS+=(--seq-length 4098)
source "${CATALOGUE_DIR}/base/launch.sh"
