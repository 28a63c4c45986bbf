#!/bin/bash
# --rotary-base 10000 (config.json: rope_theta 1000000)
# slime: slime's _hf_validate_args: rope_theta is not equal to rotary_base
# expect: validate model.rotary_base
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--rotary-base 10000)
source "${CATALOGUE_DIR}/base/launch.sh"
