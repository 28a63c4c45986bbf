#!/bin/bash
# a Ray head of 8 GPUs and a worker of 8 joined over ssh; 8 trainer + 8 rollout GPUs
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 8 --disable-usage-stats
ssh root@10.0.0.2 "ray start --address=127.0.0.1:6379 --num-gpus 8" &
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 8)
source "${CATALOGUE_DIR}/base/launch.sh"
