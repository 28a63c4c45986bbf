#!/bin/bash
# --get-mismatch-metrics without --custom-tis-function-path
# slime: slime_validate_args asserts custom_tis_function_path is set
# expect: import --get-mismatch-metrics
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--get-mismatch-metrics)
source "${CATALOGUE_DIR}/base/launch.sh"
