#!/bin/bash
# --max-position-embeddings 2048 (below slime's placeholder --seq-length 4096)
# slime: Megatron validate_args asserts max_position_embeddings >= seq_length
# expect: slime model.max_position_embeddings
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--max-position-embeddings 2048)
source "${CATALOGUE_DIR}/base/launch.sh"
