#!/bin/bash
# one Ray head of 8 GPUs; 4 trainer + 4 rollout GPUs
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 8 --disable-usage-stats
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 4)
source "${CATALOGUE_DIR}/base/launch.sh"
