#!/bin/bash
# Megatron's CPU optimizer offload, as slime's scripts spell it: train.megatron (megatron-core's OptimizerConfig),
# with Megatron-LM's --optimizer-offload-fraction default 1.0
# expect: valid
# check: train.megatron.optimizer_cpu_offload = true
# check: train.megatron.overlap_cpu_optimizer_d2h_h2d = true
# check: train.megatron.use_precision_aware_optimizer = true
# check: train.megatron.optimizer_offload_fraction = 1.0
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
OPTIMIZER_ARGS+=(--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
source "${HERE}/launch.sh"
