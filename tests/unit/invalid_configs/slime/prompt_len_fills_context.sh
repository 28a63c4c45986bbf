#!/bin/bash
# --rollout-max-prompt-len 4096 with --rollout-max-context-len 4096
# slime: slime_validate_args asserts rollout_max_prompt_len <= rollout_max_context_len - 1
# expect: validate data.max_prompt_len
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ROLLOUT_ARGS+=(--rollout-max-context-len 4096 --rollout-max-prompt-len 4096)
source "${CATALOGUE_DIR}/base/launch.sh"
