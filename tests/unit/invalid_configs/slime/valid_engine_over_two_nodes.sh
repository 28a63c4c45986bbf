#!/bin/bash
# one SGLang engine of 16 GPUs on nodes of 8 (--rollout-num-gpus-per-engine 16, --num-gpus-per-node 8), disaggregated
# slime: runs the engine as one SGLang server per node (--nnodes 2 --node-rank 0/1 --dist-init-addr of node 0)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 16 --num-gpus-per-node 8)
SGLANG_ARGS=(--rollout-num-gpus-per-engine 16 --sglang-mem-fraction-static 0.7)
source "${CATALOGUE_DIR}/base/launch.sh"
