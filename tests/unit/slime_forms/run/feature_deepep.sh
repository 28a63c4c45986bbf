#!/bin/bash
# DeepEP, as slime's scripts spell it: megatron-core's flex token dispatcher with its deepep backend, passed through
# (train.megatron); whether deep_ep is installed is the preflight's question (rlrun validate --check-paths)
# expect: valid
# check: train.megatron.moe_token_dispatcher_type = "flex"
# check: train.megatron.moe_enable_deepep = true
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
PERF_ARGS+=(--moe-enable-deepep --moe-token-dispatcher-type flex)
source "${HERE}/launch.sh"
