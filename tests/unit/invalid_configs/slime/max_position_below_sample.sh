#!/bin/bash
# --max-position-embeddings 8192 with responses of up to 8192 tokens
# slime: trains; positions past 8192 are beyond the training limit the script sets
# expect: slime model.max_position_embeddings
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--max-position-embeddings 8192)
source "${CATALOGUE_DIR}/base/launch.sh"
