#!/bin/bash
# colocated on 2 nodes x 8 GPUs with one SGLang engine of 16 GPUs spanning both
# slime: runs (weights pushed by per-GPU CUDA IPC, gathered from the trainer ranks of each engine);
# rlrun: runs with weight sync by disk (rollout.weight_sync=auto across nodes)
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 2 --actor-num-gpus-per-node 8 --colocate --no-offload-train --no-offload-rollout)
SGLANG_ARGS=(--rollout-num-gpus-per-engine 16 --sglang-mem-fraction-static 0.7)
source "${CATALOGUE_DIR}/base/launch.sh"
