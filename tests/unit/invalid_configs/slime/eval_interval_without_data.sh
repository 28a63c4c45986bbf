#!/bin/bash
# --eval-interval 20 without --eval-prompt-data
# slime: asserts eval data
# expect: validate eval.interval
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
EVAL_ARGS=(--eval-interval 20 --n-samples-per-eval-prompt 16)
source "${CATALOGUE_DIR}/base/launch.sh"
