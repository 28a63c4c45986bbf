#!/bin/bash
# --mtp-num-layers 1 on Qwen3-4B, whose config.json has no num_nextn_predict_layers (and whose family has no MTP layers)
# slime: Megatron builds an MTP layer the checkpoint conversion has no weights for
# expect: validate model.mtp_num_layers
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--mtp-num-layers 1)
source "${CATALOGUE_DIR}/base/launch.sh"
