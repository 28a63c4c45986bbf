#!/bin/bash
# --rollout-num-gpus-per-engine 16 on nodes of 8
# slime: an engine cannot span nodes (SGLang TP on one node)
# expect: validate rollout.gpus_per_engine
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
SGLANG_ARGS+=(--rollout-num-gpus-per-engine 16)
PLACEMENT_ARGS=(--actor-num-nodes 2 --actor-num-gpus-per-node 8 --colocate --no-offload-train --no-offload-rollout)
source "${CATALOGUE_DIR}/base/launch.sh"
