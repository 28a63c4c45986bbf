#!/bin/bash
# Multi-token prediction as slime's MiMo script spells it (scripts/run-mimo-7B-rl-eagle.sh): Megatron's
# --mtp-num-layers in the model flags (a Qwen2-layout model with MiMo's MTP layer), slime's --enable-mtp-training and
# Megatron's --mtp-loss-scaling-factor; the megatron backend builds the MTP block (docs/megatron.md)
# expect: valid
# check: model.family = "qwen2"
# check: model.mtp_num_layers = 1
# check: train.mtp.enabled = true
# check: train.mtp.loss_scaling_factor = 0.2
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${HERE}/common.sh"
MODEL_ARGS=(--swiglu --num-layers 36 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32
   --group-query-attention --num-query-groups 8 --use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias
   --normalization "RMSNorm" --norm-epsilon 1e-05 --rotary-base 640000 --vocab-size 151680
   --untie-embeddings-and-output-weights --mtp-num-layers 1)
CKPT_ARGS=(--hf-checkpoint /nowhere/MiMo-7B-RL --ref-load /nowhere/MiMo-7B-RL_torch_dist --save /nowhere/out)
PERF_ARGS+=(--tensor-model-parallel-size 1 --max-tokens-per-gpu 16384)
MISC_ARGS+=(--enable-mtp-training --mtp-loss-scaling-factor 0.2)
source "${HERE}/launch.sh"
