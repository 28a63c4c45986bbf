#!/bin/bash
# --norm-epsilon 1e-5 (config.json: rms_norm_eps 1e-6)
# slime: slime's _hf_validate_args: rms_norm_eps in hf config is not equal to norm_epsilon
# expect: validate model.norm_epsilon
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--norm-epsilon 1e-5)
source "${CATALOGUE_DIR}/base/launch.sh"
