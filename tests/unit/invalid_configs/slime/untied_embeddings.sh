#!/bin/bash
# --untie-embeddings-and-output-weights (config.json: tie_word_embeddings true)
# slime: slime's _hf_validate_args: tie_word_embeddings mismatch
# expect: validate model.tie_word_embeddings
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--untie-embeddings-and-output-weights)
source "${CATALOGUE_DIR}/base/launch.sh"
