#!/bin/bash
# DeepEP (megatron-core's flex dispatcher backend): cannot be installed on rlrun's GPU image, refused naming it
# expect: refused --moe-enable-deepep DeepEP MoE dispatch
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
PERF_ARGS+=(--moe-enable-deepep)
source "${HERE}/launch.sh"
