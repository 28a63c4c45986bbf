#!/bin/bash
# no --colocate and no --rollout-num-gpus
# slime: TypeError while placing the engines (rollout_num_gpus is None)
# expect: validate rollout.num_gpus
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8)
source "${CATALOGUE_DIR}/base/launch.sh"
