#!/bin/bash
# --rollout-num-gpus-per-engine 12 on nodes of 8 GPUs (24 rollout GPUs)
# slime: nnodes = 12 // 8 = 1, so SGLang is asked for TP 12 on one node of 8 GPUs and fails at start-up
# expect: validate rollout.gpus_per_engine
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
PLACEMENT_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 24 --num-gpus-per-node 8)
SGLANG_ARGS=(--rollout-num-gpus-per-engine 12 --sglang-mem-fraction-static 0.7)
source "${CATALOGUE_DIR}/base/launch.sh"
