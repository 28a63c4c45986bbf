# Qwen3-4B as Megatron sees it (rlrun test data, written from the model card values):
# 36 layers, hidden 2560, FFN 9728, 32 heads in 8 KV groups of head dim 128, vocab 151936,
# rope base 1e6, RMSNorm eps 1e-6, tied embeddings, QK-layernorm, SwiGLU, no biases.
MODEL_ARGS=(
   --num-layers 36
   --hidden-size 2560
   --ffn-hidden-size 9728
   --swiglu
   --num-attention-heads 32
   --group-query-attention --num-query-groups 8
   --kv-channels 128
   --qk-layernorm
   --use-rotary-position-embeddings
   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"
   --normalization "RMSNorm"
   --norm-epsilon 1e-6
   --disable-bias-linear
   --vocab-size 151936
)
