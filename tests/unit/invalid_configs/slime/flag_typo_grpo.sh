#!/bin/bash
# a misspelt flag: --eps-clip-hihg
# slime: its parser ignores unknown flags: the upper clip stays 0.28
# expect: import --eps-clip-hihg
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--eps-clip-hihg 0.3)
source "${CATALOGUE_DIR}/base/launch.sh"
