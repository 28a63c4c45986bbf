# GLM-Z1-9B-0414 as Megatron sees it (rlrun test data): 40 layers, hidden 4096, FFN 13696,
# 32 heads in 2 KV groups, qkv bias, post-attention and post-MLP norms, interleaved rope on half
# of the head dim with base 1e4, RMSNorm eps 1e-5, untied embeddings, vocab 151552.
MODEL_ARGS=(
   --spec "slime_plugins.models.glm4" "get_glm_spec"
   --num-layers 40
   --hidden-size 4096
   --ffn-hidden-size 13696
   --swiglu
   --num-attention-heads 32
   --group-query-attention
   --num-query-groups 2
   --kv-channels 128
   --add-qkv-bias
   --disable-bias-linear
   --post-self-attn-layernorm
   --post-mlp-layernorm
   --use-rotary-position-embeddings
   --rotary-interleaved
   --rotary-percent 0.5
   --rotary-base 10000
   --no-rope-fusion
   --normalization "RMSNorm"
   --norm-epsilon 1e-5
   --vocab-size 151552
   --untie-embeddings-and-output-weights
)
