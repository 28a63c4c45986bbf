#!/bin/bash
# TP 1 with --sequence-parallel
# slime: Megatron drops sequence parallelism at TP 1 (a warning)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--tensor-model-parallel-size 1)
source "${CATALOGUE_DIR}/base/launch.sh"
