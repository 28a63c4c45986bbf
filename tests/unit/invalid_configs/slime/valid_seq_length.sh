#!/bin/bash
# --seq-length 4096 (Megatron's placeholder: slime packs variable-length sequences)
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--seq-length 4096)
source "${CATALOGUE_DIR}/base/launch.sh"
