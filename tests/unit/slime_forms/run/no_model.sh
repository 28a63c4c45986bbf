#!/bin/bash
# No model flags reach train.py: Megatron would not start
# expect: refused (model flags) Megatron refuses to start
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
unset MODEL_ARGS
source "${HERE}/launch.sh"
