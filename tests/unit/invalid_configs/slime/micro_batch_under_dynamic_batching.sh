#!/bin/bash
# --micro-batch-size 3 beside --use-dynamic-batch-size (global batch 256, DP 4: 256 % 12 != 0)
# slime: Megatron's microbatch calculator asserts global_batch_size % (micro_batch_size * DP) == 0 at start-up
# expect: slime train.micro_batch_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--micro-batch-size 3)
source "${CATALOGUE_DIR}/base/launch.sh"
