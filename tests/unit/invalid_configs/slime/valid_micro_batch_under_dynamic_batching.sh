#!/bin/bash
# --micro-batch-size 4 beside --use-dynamic-batch-size (global batch 256, DP 4: 256 % 16 == 0)
# slime: runs (dynamic batching packs by tokens; the micro-batch size only sizes Megatron's calculator)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--micro-batch-size 4)
source "${CATALOGUE_DIR}/base/launch.sh"
