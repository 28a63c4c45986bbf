#!/bin/bash
# a Ray head of 8 GPUs; a trainer on 2 nodes (the second joins outside the script, as in slime's multi-node recipes)
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 8 --disable-usage-stats
PLACEMENT_ARGS=(--actor-num-nodes 2 --actor-num-gpus-per-node 8 --colocate --no-offload-train --no-offload-rollout)
source "${CATALOGUE_DIR}/base/launch.sh"
