#!/bin/bash
# --advantage-estimator grpoo
# slime: argparse: invalid choice 'grpoo'
# expect: validate algo.advantage_estimator
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--advantage-estimator grpoo)
source "${CATALOGUE_DIR}/base/launch.sh"
