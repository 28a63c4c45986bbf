#!/bin/bash
# A `\` missing after an inline flag: bash runs the rest as a command, so train.py gets no model flags
# expect: refused (model flags) line continuation
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
ray job submit --address="http://127.0.0.1:8265" -- python3 train.py \
   --update-weight-buffer-size $(( 512 * 1024 * 1024 ))
   ${MODEL_ARGS[@]} \
   ${CKPT_ARGS[@]}
