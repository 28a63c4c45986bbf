#!/bin/bash
# Gated attention (Qwen3-Next, Qwen3.5): a slime feature rlrun lacks, named by the refusal
# expect: refused --use-gated-attention gated attention / hybrid layers (Qwen3-Next, Qwen3.5)
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
MODEL_ARGS+=(--use-gated-attention)
source "${HERE}/launch.sh"
