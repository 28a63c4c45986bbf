#!/bin/bash
# FP8 training (Transformer Engine's FP8 GEMMs and layer spec): a slime feature rlrun lacks, named by the refusal
# expect: refused --fp8-format FP8 training
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
PERF_ARGS+=(--transformer-impl transformer_engine --fp8-format e4m3 --fp8-recipe blockwise)
source "${HERE}/launch.sh"
