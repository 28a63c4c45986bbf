"""Megatron-core pieces of the `megatron` trainer backend (CUDA only).

Nothing here imports megatron-core at package import time: `rlrun plan` and the CPU test suite
must work where megatron-core is absent. Each module imports it where it is used.

    layers.py      norm with sequence-parallel grads, post-norm linear (GLM-4), SDPA core attention
    layer_spec.py  the local (no Transformer Engine) layer spec built from those layers
    model.py       RunConfig -> TransformerConfig -> GPTModel, parallel state
    weights.py     Hugging Face <-> Megatron parameter mapping (per architecture, TP-aware)
    packing.py     samples -> packed THD micro-batches bounded by max_tokens_per_gpu
    fast_ops.py    torch multi-tensor kernels for megatron-core's optimizer without Apex/TE
    kernels.py     Liger's RMSNorm and a Triton SwiGLU in place of Transformer Engine's (GPU)
    rope.py        rotary embeddings of packed micro-batches without host syncs
    graphs.py      train.cuda_graphs: a micro-batch's forward + loss + backward as one CUDA graph
    wgrad.py       gradient-accumulation fusion through torch's addmm(out_dtype=float32)
"""
