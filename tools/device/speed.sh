#!/usr/bin/env bash
# Issue 5's throughput runs in one device call on nvidia-h100-x1 (after `source tools/device/stage.sh`).
# PARTS="..." picks and orders them (default: all below). Each part runs under tools/device/watchdog.py;
# everything lands in $OUT (speed.md + one log per part).
#   gpu_tests    tests/gpu/test_megatron_backend.py (agreement with the torch backend, wgrad fusion, offload)
#   floor        bench/step_floor.py: GPU time by kernel kind for both backends, Qwen3-1.7B seq 4096
#   mfu_1x4096   bench/megatron_mfu.py, Qwen3-1.7B, one 4096-token sequence per step (hardware=h100 defaults)
#   mfu_nofusion the same, megatron only, train.gradient_accumulation_fusion=false
#   mfu_4b       Qwen3-4B with full recompute, both backends
#   mfu_4b_nofusion  the same, megatron only, train.gradient_accumulation_fusion=false
#   parity       tests/gpu/test_megatron_parity.py (logits vs transformers, packed THD vs per sequence)
#   mfu_4x4096   4 sequences per step, one per micro-batch;  mfu_4x4096_mb8192: two per micro-batch
#   profile      tools/device/profile_step.py kernel table
#   kernels      tests/gpu/test_megatron_kernels.py (Liger RMSNorm, Triton SwiGLU vs torch)
#   profile_nokernels  profile_step's phases without rlrun.train.megatron.kernels/.rope (the A/B)
#   mfu_torch_kernels  mfu_1x4096, megatron only, without those kernels
#   probe        tools/device/graph_probe.py: host syncs in a micro-batch, and one capture
#   graphs_test  tests/gpu/test_megatron_backend.py -k cuda_graphs (graphs vs eager, 3 steps)
#   mfu_graphs   mfu_1x4096 with train.cuda_graphs=true (3 warm-up steps: eager, capture, replay)
#   mfu_graphs_4x4096  the same at 4 sequences per step (the fourth pass's 1.37-1.39x row)
#   adam_test    the fused AdamW kernel: tests/gpu kernels -k adamw, backend -k "fused_adam or offload or save_load"
#   mfu_adam_off mfu_graphs, megatron only, with torch's fused AdamW instead of rlrun's kernel (the A/B)
#   mfu_4b_graphs  Qwen3-4B without recompute: bf16 Adam moments + bf16 grads ($LEAN), CUDA graphs, both backends
#   mfu_4b_graphs_4x4096  the same at 4 sequences per step
#   mfu_lean / mfu_lean_4x4096  Qwen3-1.7B, CUDA graphs and $LEAN, 1 / 4 sequences per step, both backends
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
R=$OUT/speed.md
PARTS=${PARTS:-gpu_tests floor mfu_1x4096 mfu_nofusion mfu_4b mfu_4x4096 mfu_4x4096_mb8192 profile}
echo "# tools/device/speed.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null); parts: $PARTS" > "$R"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> "$R"
part() {  # part NAME LIMIT CMD...
  local name=$1 limit=$2
  shift 2
  echo "- $(python3 tools/device/watchdog.py --limit "$limit" --log "$OUT/$name.log" --name "$name" -- "$@")" >> "$R"
  grep -E "^PROBE|^GRAPHS|^KERNEL|^PARITY|^BENCH|^MEMORY|^FLOOR [a-z]|^WGRAD|tokens per step|^PHASES|passed|failed|Error|^[a-z/ ]+ +[0-9.]+ +[0-9.]+$" "$OUT/$name.log" | sed 's/^/    /' >> "$R"
}
MFU="python3 bench/megatron_mfu.py"
LEAN="--set optim.state_dtype=bf16 --set train.fp32_grads=false"  # still fp32 master weights
for p in $PARTS; do
  case $p in
    gpu_tests) part gpu_tests 150 python3 -m pytest -q -x -s -p no:cacheprovider tests/gpu/test_megatron_backend.py ;;
    floor) part floor 150 python3 bench/step_floor.py --model qwen3-1.7b --seq 4096 ;;
    mfu_1x4096) part mfu_1x4096 130 $MFU --models qwen3-1.7b --steps 6 --warmup 2 ;;
    mfu_nofusion) part mfu_nofusion 80 $MFU --models qwen3-1.7b --steps 6 --warmup 2 --backends megatron \
        --set train.gradient_accumulation_fusion=false ;;
    mfu_4b) part mfu_4b 200 $MFU --models qwen3-4b --recompute qwen3-4b --steps 4 --warmup 2 ;;
    mfu_4b_nofusion) part mfu_4b_nofusion 120 $MFU --models qwen3-4b --recompute qwen3-4b --steps 4 --warmup 2 \
        --backends megatron --set train.gradient_accumulation_fusion=false ;;
    parity) part parity 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_megatron_parity.py ;;
    mfu_4x4096) part mfu_4x4096 200 $MFU --models qwen3-1.7b --seqs 4 --steps 4 --warmup 2 ;;
    mfu_4x4096_mb8192) part mfu_4x4096_mb8192 200 $MFU --models qwen3-1.7b --seqs 4 --max-tokens 8192 --steps 4 --warmup 2 ;;
    profile) part profile 90 python3 tools/device/profile_step.py qwen3-1.7b 4096 all table ;;
    probe) part probe 90 python3 tools/device/graph_probe.py tiny 96 ;;
    graphs_test) part graphs_test 160 python3 -m pytest -q -x -s -p no:cacheprovider tests/gpu/test_megatron_backend.py \
        -k cuda_graphs ;;
    mfu_graphs) part mfu_graphs 130 $MFU --models qwen3-1.7b --steps 8 --warmup 3 --set train.cuda_graphs=true ;;
    mfu_graphs_4x4096) part mfu_graphs_4x4096 180 $MFU --models qwen3-1.7b --seqs 4 --steps 4 --warmup 3 \
        --set train.cuda_graphs=true ;;
    adam_test) part adam_test 200 python3 -m pytest -q -x -s -p no:cacheprovider tests/gpu/test_megatron_kernels.py \
        tests/gpu/test_megatron_backend.py -k "adamw or fused_adam or offload or save_load" ;;
    mfu_adam_off) part mfu_adam_off 100 $MFU --models qwen3-1.7b --steps 8 --warmup 3 --backends megatron \
        --set train.cuda_graphs=true --torch-adam ;;
    mfu_4b_graphs) part mfu_4b_graphs 220 $MFU --models qwen3-4b --steps 4 --warmup 3 --set train.cuda_graphs=true $LEAN ;;
    mfu_4b_graphs_4x4096) part mfu_4b_graphs_4x4096 300 $MFU --models qwen3-4b --seqs 4 --steps 3 --warmup 3 \
        --set train.cuda_graphs=true $LEAN ;;
    mfu_lean) part mfu_lean 130 $MFU --models qwen3-1.7b --steps 8 --warmup 3 --set train.cuda_graphs=true $LEAN ;;
    mfu_lean_4x4096) part mfu_lean_4x4096 180 $MFU --models qwen3-1.7b --seqs 4 --steps 4 --warmup 3 \
        --set train.cuda_graphs=true $LEAN ;;
    kernels) part kernels 90 python3 -m pytest -q -x -s -p no:cacheprovider tests/gpu/test_megatron_kernels.py ;;
    profile_nokernels) part profile_nokernels 80 python3 tools/device/profile_step.py qwen3-1.7b 4096 nokernels ;;
    mfu_torch_kernels) part mfu_torch_kernels 80 $MFU --models qwen3-1.7b --steps 6 --warmup 2 --backends megatron \
        --torch-kernels ;;
    *) echo "- $p: unknown part" >> "$R" ;;
  esac
done
cat "$R"
