#!/bin/bash
# --sglang-pp-size 4 with --rollout-num-gpus-per-engine 2
# slime: slime's sglang validate_args asserts rollout_num_gpus_per_engine % sglang_pp_size == 0
# expect: validate rollout.sglang.pp_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
SGLANG_ARGS+=(--sglang-pp-size 4)
source "${CATALOGUE_DIR}/base/launch.sh"
