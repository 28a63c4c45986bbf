#!/bin/bash
# Multi-token prediction: a slime feature rlrun lacks, named by the refusal
# expect: refused --mtp-num-layers multi-token prediction (MTP)
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
MODEL_ARGS+=(--mtp-num-layers 1)
source "${HERE}/launch.sh"
