#!/usr/bin/env bash
# Issue 5's throughput runs in one device call on nvidia-h100-x1 (after `source tools/device/stage.sh`):
# bench/megatron_mfu.py (megatron backend vs transformers + SDPA, Qwen3-1.7B shape, seq 4096) at
#   1 sequence per step, 4 sequences per step one per micro-batch, 4 per step two per micro-batch,
# then the megatron GPU tests (the backend still agrees with the torch backend) and a kernel table.
# Each part under tools/device/watchdog.py; everything lands in $OUT (speed.md + the logs).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
R=$OUT/speed.md
echo "# tools/device/speed.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)" > "$R"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> "$R"
part() {  # part NAME LIMIT CMD...
  local name=$1 limit=$2
  shift 2
  echo "- $(python3 tools/device/watchdog.py --limit "$limit" --log "$OUT/$name.log" --name "$name" -- "$@")" >> "$R"
  grep -E "^BENCH|tokens per step|^PHASES|passed|failed|Error" "$OUT/$name.log" | sed 's/^/    /' >> "$R"
}
part mfu_1x4096 150 python3 bench/megatron_mfu.py --models qwen3-1.7b --steps 6 --warmup 2
part mfu_4x4096 200 python3 bench/megatron_mfu.py --models qwen3-1.7b --seqs 4 --steps 4 --warmup 2
part mfu_4x4096_mb8192 200 python3 bench/megatron_mfu.py --models qwen3-1.7b --seqs 4 --max-tokens 8192 --steps 4 --warmup 2
part gpu_tests 120 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_megatron_backend.py
part profile 90 python3 tools/device/profile_step.py qwen3-1.7b 4096 all table
cat "$R"
