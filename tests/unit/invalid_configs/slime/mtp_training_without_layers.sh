#!/bin/bash
# --enable-mtp-training without --mtp-num-layers
# slime: slime_validate_args asserts "mtp_num_layers must be set when enable_mtp_training is set"
# expect: validate train.mtp.enabled
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MISC_ARGS+=(--enable-mtp-training)
source "${CATALOGUE_DIR}/base/launch.sh"
