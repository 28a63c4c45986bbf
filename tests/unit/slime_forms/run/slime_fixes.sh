#!/bin/bash
# Flags slime fixes or ignores, a one-path eval set, --moe-layer-freq without --num-experts, a context cap below
# prompt + response, a token budget equal to the response limit: all import and validate (no false reject)
# expect: valid
# check: eval.datasets.0.name = "aime"
# check: model.moe = null
# check: model.max_position_embeddings = 40960
# check: rollout.context_length = 4096
# check: train.max_tokens_per_gpu = 8192
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
source "${HERE}/models/seed-model.sh"
MODEL_ARGS+=(--max-position-embeddings 8192 --seq-length 4096 --moe-layer-freq "[1]*36")
EVAL_ARGS=(--eval-interval 20 --eval-prompt-data /nowhere/aime-2024.jsonl)
ROLLOUT_ARGS+=(--rollout-max-context-len 4096)
PERF_ARGS+=(--max-tokens-per-gpu 8192)
MISC_ARGS+=(--train-backend megatron --bf16 --use-distributed-optimizer)
source "${HERE}/launch.sh"
