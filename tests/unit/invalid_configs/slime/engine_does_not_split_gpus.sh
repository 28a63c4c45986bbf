#!/bin/bash
# --rollout-num-gpus-per-engine 3 on 8 rollout GPUs
# slime: the last engine gets 2 GPUs (or placement fails)
# expect: validate rollout.num_gpus
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
SGLANG_ARGS+=(--rollout-num-gpus-per-engine 3)
source "${CATALOGUE_DIR}/base/launch.sh"
