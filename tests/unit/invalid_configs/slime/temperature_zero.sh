#!/bin/bash
# --rollout-temperature 0
# slime: asserts temperature > 0
# expect: validate rollout.temperature
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--rollout-temperature 0)
source "${CATALOGUE_DIR}/base/launch.sh"
