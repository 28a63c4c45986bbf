#!/bin/bash
# --max-tokens-per-gpu 4096 cannot hold one 8192-token response
# slime: no check; the packer gets a sample larger than its budget
# expect: validate train.max_tokens_per_gpu
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PERF_ARGS+=(--max-tokens-per-gpu 4096)
source "${CATALOGUE_DIR}/base/launch.sh"
