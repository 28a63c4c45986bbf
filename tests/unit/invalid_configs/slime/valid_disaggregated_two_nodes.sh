#!/bin/bash
# 8 trainer GPUs and 8 rollout GPUs on two nodes
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 8)
source "${CATALOGUE_DIR}/base/launch.sh"
