#!/bin/bash
# --pipeline-model-parallel-size 8 at TP 1 (36 layers do not split into 8 stages)
# slime: Megatron: num_layers must be divisible by the pipeline size (no uneven stages given)
# expect: validate parallelism.pp
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--tensor-model-parallel-size 1 --pipeline-model-parallel-size 8)
source "${CATALOGUE_DIR}/base/launch.sh"
