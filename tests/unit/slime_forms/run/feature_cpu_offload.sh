#!/bin/bash
# Megatron's CPU optimizer offload: a feature rlrun lacks
# expect: refused --optimizer-cpu-offload CPU optimizer offload
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
OPTIMIZER_ARGS+=(--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d)
source "${HERE}/launch.sh"
