#!/bin/bash
# --sglang-dp-size 2 without --sglang-enable-dp-attention
# slime: slime's sglang validate_args asserts sglang_enable_dp_attention when sglang_dp_size > 1
# expect: validate rollout.sglang.dp_size
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
SGLANG_ARGS+=(--sglang-dp-size 2)
source "${CATALOGUE_DIR}/base/launch.sh"
