#!/bin/bash
# --rm-type deepscalar
# slime: the reward function lookup fails at the first rollout
# expect: validate data.rm_type
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--rm-type deepscalar)
source "${CATALOGUE_DIR}/base/launch.sh"
