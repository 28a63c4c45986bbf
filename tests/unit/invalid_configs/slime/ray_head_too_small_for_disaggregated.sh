#!/bin/bash
# one Ray head of 8 GPUs (ray start --head --num-gpus 8) and no worker; 8 trainer + 8 rollout GPUs without --colocate
# slime: its placement group of 16 GPUs waits forever on the 8 there are (slime/ray/placement_group.py _create_placement_group: the wait is unbounded)
# expect: validate cluster.num_nodes
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 8 --disable-usage-stats
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 8)
source "${CATALOGUE_DIR}/base/launch.sh"
