#!/bin/bash
# --kl-coef 0.1 with --use-kl-loss --kl-loss-coef 0.1
# slime: asserts KL is not applied twice
# expect: validate algo.kl_coef
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--kl-loss-coef 0.1 --kl-coef 0.1)
source "${CATALOGUE_DIR}/base/launch.sh"
