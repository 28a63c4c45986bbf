#!/bin/bash
# a misspelt flag: --rollout-temprature
# slime: its parser ignores unknown flags: the run samples at 0.8, the 0.6 meant here is lost
# expect: import --rollout-temprature
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--rollout-temprature 0.6)
source "${CATALOGUE_DIR}/base/launch.sh"
