#!/bin/bash
# --kl-loss-type k4
# slime: argparse: invalid choice 'k4' (choices k1, k2, k3, low_var_kl)
# expect: validate algo.kl_loss_type
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--kl-loss-type k4)
source "${CATALOGUE_DIR}/base/launch.sh"
