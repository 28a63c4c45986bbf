#!/bin/bash
# --tensor-model-parallel-size 3 on 8 GPUs
# slime: Megatron's world-size assert
# expect: validate parallelism.tp
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--tensor-model-parallel-size 3)
source "${CATALOGUE_DIR}/base/launch.sh"
