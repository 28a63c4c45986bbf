#!/bin/bash
# --expert-model-parallel-size 2 on the dense Qwen3-4B
# slime: Megatron: expert parallelism needs --num-experts
# expect: validate parallelism.ep
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--expert-model-parallel-size 2)
source "${CATALOGUE_DIR}/base/launch.sh"
