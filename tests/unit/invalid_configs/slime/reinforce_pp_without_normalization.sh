#!/bin/bash
# --advantage-estimator reinforce_plus_plus without --normalize-advantages
# slime: slime_validate_args asserts normalize_advantages for reinforce_plus_plus
# expect: validate algo.normalize_advantages
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--advantage-estimator reinforce_plus_plus)
source "${CATALOGUE_DIR}/base/launch.sh"
