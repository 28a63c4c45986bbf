#!/bin/bash
# --use-rollout-logprobs with --use-tis
# slime: slime_validate_args asserts not (use_rollout_logprobs and use_tis)
# expect: validate algo.use_tis
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--use-rollout-logprobs --use-tis)
source "${CATALOGUE_DIR}/base/launch.sh"
