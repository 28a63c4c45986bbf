#!/bin/bash
# --min-lr 1e-5 above --lr 1e-6
# slime: Megatron validate_args asserts min_lr <= lr
# expect: validate optim.min_lr
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
OPTIMIZER_ARGS+=(--min-lr 1e-5)
source "${CATALOGUE_DIR}/base/launch.sh"
