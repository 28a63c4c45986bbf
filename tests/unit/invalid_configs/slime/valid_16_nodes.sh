#!/bin/bash
# 16 nodes x 8 GPUs, colocated
# slime: runs on a 16-node Ray cluster
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 16 --actor-num-gpus-per-node 8 --colocate --no-offload-train --no-offload-rollout)
source "${CATALOGUE_DIR}/base/launch.sh"
