#!/bin/bash
# --seq-length 32768 with no --max-position-embeddings (slime copies it there)
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
MODEL_ARGS+=(--seq-length 32768)
source "${CATALOGUE_DIR}/base/launch.sh"
