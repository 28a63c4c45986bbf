#!/bin/bash
# (HERE, not SCRIPT_DIR: the seed script sourced by common.sh sets SCRIPT_DIR to its own folder)
# Every bash form of slime's launch scripts at once; bash gives: 36 layers, TP 4 (the if block), 4 x 8 = 32
# prompts per rollout, the data under the folder two levels up, HAS_NVLINK=0 (no NVLink in the sandbox).
# expect: valid
# check: model.num_layers = 36
# check: parallelism.tp = 4
# check: rollout.rollout_batch_size = 32
# check: data.prompt_data = "{root}/data/prompts.jsonl"
# check: hardware.env.FORMS_HAS_NVLINK = "0"
set -euxo pipefail
pkill -9 sglang
ray stop --force
pkill -9 python
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
ROOT="$(cd "${HERE}/.." && pwd)"
source "${HERE}/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/models/seed-model.sh"
NVLINK_COUNT=$(nvidia-smi topo -m 2>/dev/null | grep -o 'NV[0-9][0-9]*' | wc -l)
if [ "$NVLINK_COUNT" -gt 0 ]; then HAS_NVLINK=1; else HAS_NVLINK=0; fi
TP=2
if [ "$HAS_NVLINK" = 0 ]; then
  TP=4
fi
MEGATRON_PATH=$(pip list | grep megatron-core | awk '{print $NF}')
PROMPTS=4
ROLLOUT_ARGS+=(--rollout-batch-size $(( PROMPTS * 8 )) --prompt-data "${ROOT}/data/prompts.jsonl" --global-batch-size 256)
PERF_ARGS+=(--tensor-model-parallel-size ${TP})
source "${HERE}/launch.sh"
