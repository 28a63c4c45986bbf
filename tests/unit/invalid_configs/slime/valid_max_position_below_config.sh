#!/bin/bash
# --max-position-embeddings 16384, below config.json's 40960 (prompt + response fit)
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--max-position-embeddings 16384)
source "${CATALOGUE_DIR}/base/launch.sh"
