#!/bin/bash
# one Ray head of 4 GPUs; a colocated trainer of 8 GPUs on it
# slime: the placement group of 8 GPUs waits forever on 4 (slime/ray/placement_group.py)
# expect: validate train.gpus_per_node
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 4 --disable-usage-stats
source "${CATALOGUE_DIR}/base/launch.sh"
