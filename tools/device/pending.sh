#!/usr/bin/env bash
# Every GPU measurement still owed by issues 4, 5 and 6, in ONE device call on nvidia-h200-x2
# (after the two staging calls of tools/device/README.md):
#
#   source tools/device/stage.sh && bash tools/device/pending.sh
#
# Items (in this order; ITEMS="..." picks and reorders, PENDING_BUDGET_S bounds the whole call):
#   probe         torch/GPU/packages, nvidia-smi topology                                   ~10 s
#   tp            issue 5: TP=2 vs TP=1 on 2 GPUs (tests/gpu/tp_check.py under torchrun)   ~60 s
#   memory        issue 6 §4: hf engine release/resume_memory_occupation frees GPU memory     ~30 s
#                 and restores the same tokens (tests/gpu/test_gpu_hf_engine_memory.py)
#   e2e_megatron  issues 4+5: `rlrun hardware=h100 train.backend=megatron` 3 GRPO steps     ~200 s
#                 through Ray (hf engine, Qwen3-0.6B shape, GPU 0), per-phase timings
#   sync          issue 6: NCCL broadcast Megatron rank (cuda:0) -> hf engine (cuda:1), GB/s ~80 s
#   e2e_torch     issue 4 with train.backend=torch (same command), per-phase timings          ~180 s
#   sync_hf       HF trainer -> hf engine NCCL broadcast (bench/rollout_weight_sync.py)       ~60 s
#   mfu           (not in the default list) issue 5's throughput: megatron vs transformers+SDPA,
#                 Qwen3-1.7B, seq 4096 (bench/megatron_mfu.py); re-run after a speed change   ~120 s
#   mfu_gpu1      (not in the default list) in the BACKGROUND on GPU 1 while the next items use
#                 GPU 0: bench/megatron_mfu.py for Qwen3-1.7B and Qwen3-4B (4B with and without
#                 full recompute: peak memory vs `rlrun plan` on the 141 GB H200); put it first ~300 s
# Each item runs under tools/device/watchdog.py: at its limit (or what is left of the budget)
# every process of its tree dumps its Python stacks into the item's log and is killed, so a hang
# costs one item, not the call. An item that no longer fits is SKIPPED (listed in results.md).
#
# E2E_OVERRIDES (default "hardware=h100 model=qwen3-0.6b") lets the CPU check of this script run
# the e2e items with "hardware=cpu model=tiny" (tools/device/README.md).
#
# $OUT gets two files: results.md (what to paste into docs/benchmarks.md) and logs.tar.gz (each
# item's full log, the runs' metrics.jsonl, the engine logs and Ray's worker logs).
set -u
OUT=${OUT:-/tmp/out}
LOGS=/tmp/pending-logs
RES=$OUT/results.md
mkdir -p "$OUT"
RUNS=/tmp/pending-runs  # run dirs hold GB checkpoints: not under $OUT
rm -rf "$LOGS" "$RUNS"
mkdir -p "$LOGS/engines"
BUDGET=${PENDING_BUDGET_S:-560}
DEADLINE=$(( $(date +%s) + BUDGET ))
ITEMS=${ITEMS:-probe tp memory e2e_megatron sync e2e_torch sync_hf}
BG=
read -r -a E2E <<< "${E2E_OVERRIDES:-hardware=h100 model=qwen3-0.6b checkpoint.random_init=true}"
LAST_RC=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} TORCH_NCCL_ASYNC_ERROR_HANDLING=1 PYTHONUNBUFFERED=1

{
  echo "# tools/device/pending.sh $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') (+ carried working tree); items: $ITEMS; budget ${BUDGET}s"
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | sed 's/^/    /'
} > "$RES"

# step NAME LIMIT CMD...: CMD under the watchdog, within what is left of the budget; returns CMD's rc.
step() {
  local name=$1 limit=$2 left line rc
  shift 2
  LAST_RC=99
  left=$(( DEADLINE - $(date +%s) - 20 ))  # 20 s for the summary and the tar
  # an item that would get less than 60% of its limit would most likely be cut off: skip it
  if (( left < 30 || left * 10 < limit * 6 )); then
    echo "- $name: SKIPPED (${left}s of the budget left; run again with ITEMS=$name)" >> "$RES"
    return 99
  fi
  (( limit > left )) && limit=$left
  line=$(python3 tools/device/watchdog.py --limit "$limit" --log "$LOGS/$name.log" --name "$name" -- "$@")
  rc=$?
  LAST_RC=$rc
  echo "- $line (limit ${limit}s)" >> "$RES"
  return $rc
}

# Lines of a log worth reading in results.md: the item's own result lines and, when it failed,
# its first traceback (torchrun's tail is only the elastic summary) and its last lines.
show() {  # show LOG PATTERN
  [ -f "$1" ] || return 0
  local parts=()
  parts+=("$(grep -E "$2" "$1" 2>/dev/null | tail -40)")
  if grep -q -E "Traceback|WATCHDOG" "$1" 2>/dev/null; then
    parts+=("--- first traceback in $(basename "$1"):" "$(grep -m1 -A30 -E "Traceback|WATCHDOG" "$1")")
  fi
  if [ "$LAST_RC" != 0 ]; then
    parts+=("--- last lines of $(basename "$1"):" "$(grep -v -E "^\s*$" "$1" | tail -12)")
  fi
  local text
  text=$(printf '%s\n' "${parts[@]}" | sed '/^$/d')
  [ -n "$text" ] && printf '```\n%s\n```\n' "$text" >> "$RES"
  return 0
}

# 3 GRPO steps through Ray on GPU 0, the command of issue 4's acceptance (docs/benchmarks.md).
# A random-init model scores 0 on the toy task, so GRPO's advantages are 0; the small entropy bonus
# keeps a gradient, so every step changes the weights and every weight sync moves new weights.
e2e() {  # e2e BACKEND LIMIT
  local be=$1 extra=() run m
  [ "$be" = megatron ] && extra+=(train.gradient_accumulation_fusion=false)
  echo -e "\n## e2e train.backend=$be: 3 GRPO steps through Ray (hf engine, one GPU; ${E2E[*]})" >> "$RES"
  CUDA_VISIBLE_DEVICES=0 step "e2e_$be" "$2" python3 -c 'import sys; from rlrun.cli import main; sys.exit(main())' \
    "${E2E[@]}" train.backend="$be" "${extra[@]}" train.gpus_per_node=1 rollout.engine=hf \
    rollout.num_rollout=3 rollout.rollout_batch_size=8 rollout.n_samples_per_prompt=4 rollout.max_response_len=64 \
    eval.max_response_len=64 logging.wandb.mode=disabled run.output_dir="$RUNS" run.name="e2e-$be" \
    algo.entropy_coef=0.001 ${E2E_EXTRA:-}
  m=$(ls -t "$RUNS"/e2e-"$be"/*/metrics.jsonl 2>/dev/null | head -1)
  if [ -n "$m" ]; then
    run=$(dirname "$m")
    cp "$m" "$LOGS/metrics_$be.jsonl"
    echo "per-phase timings (\`python3 bench/loop_default.py --summarise $run\`):" >> "$RES"
    echo '```json' >> "$RES"
    python3 bench/loop_default.py --summarise "$run" >> "$RES" 2>&1
    echo '```' >> "$RES"
  else
    echo "no metrics.jsonl under $RUNS/e2e-$be" >> "$RES"
  fi
  show "$LOGS/e2e_$be.log" "^(ERROR|RuntimeError|ValueError)"
}

for item in $ITEMS; do
  case $item in
    probe)
      echo -e "\n## probe" >> "$RES"
      step probe 60 bash -c 'python3 tools/device/probe.py; nvidia-smi topo -m'
      show "$LOGS/probe.log" "^(torch|varlen|transformer_engine|apex|flash_attn|mbridge|GPU)" ;;
    tp)
      echo -e "\n## TP=2 vs TP=1 (\`torchrun --nproc-per-node 2 tests/gpu/tp_check.py\`)" >> "$RES"
      TP_CHECK_DUMP_S=110 step tp 150 python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29611 \
        tests/gpu/tp_check.py
      show "$LOGS/tp.log" "^TP2 [a-z]" ;;
    memory)
      echo -e "\n## hf engine memory release/resume on the GPU (\`pytest -s tests/gpu/test_gpu_hf_engine_memory.py\`)" >> "$RES"
      step memory 90 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_hf_engine_memory.py
      show "$LOGS/memory.log" "^MEMORY|passed|failed|skipped" ;;
    e2e_megatron) e2e megatron 260 ;;
    e2e_torch) e2e torch 230 ;;
    sync)
      echo -e "\n## NCCL weight sync Megatron rank (cuda:0) -> hf engine (cuda:1) (\`bench/megatron_weight_sync.py\`)" >> "$RES"
      step sync 150 python3 bench/megatron_weight_sync.py --engine-device cuda:1 --log-dir "$LOGS/engines"
      show "$LOGS/sync.log" "^SYNC" ;;
    sync_hf)
      echo -e "\n## NCCL weight sync HF trainer (cuda:0) -> hf engine (cuda:1) (\`bench/rollout_weight_sync.py\`)" >> "$RES"
      step sync_hf 120 python3 bench/rollout_weight_sync.py --backend nccl --trainer-device cuda:0 \
        --engine-device cuda:1 --dtype bfloat16 --shape qwen3-0.6b --paths broadcast
      show "$LOGS/sync_hf.log" '^\{"path"' ;;
    mfu)
      echo -e "\n## throughput, Qwen3-1.7B seq 4096 (\`bench/megatron_mfu.py --models qwen3-1.7b\`)" >> "$RES"
      step mfu 200 python3 bench/megatron_mfu.py --models qwen3-1.7b --json "$LOGS/mfu.json"
      show "$LOGS/mfu.log" "^BENCH" ;;
    mfu_gpu1)
      echo -e "\n## throughput and peak memory on GPU 1, Qwen3-1.7B and Qwen3-4B (\`bench/megatron_mfu.py\`, background)" >> "$RES"
      ( CUDA_VISIBLE_DEVICES=1 step mfu_gpu1 420 bash -c "python3 bench/megatron_mfu.py --models qwen3-1.7b,qwen3-4b \
          --steps 6 --warmup 2 && python3 bench/megatron_mfu.py --models qwen3-4b --recompute qwen3-4b \
          --backends megatron --steps 6 --warmup 2"
        show "$LOGS/mfu_gpu1.log" "^BENCH" ) &
      BG=$! ;;
    *) echo "- $item: unknown item (probe tp memory e2e_megatron sync e2e_torch sync_hf mfu mfu_gpu1)" >> "$RES" ;;
  esac
done

[ -n "${BG:-}" ] && wait "$BG"  # the background item writes its own lines into results.md

# Ray's own logs (worker stderr holds the faulthandler stacks of a hung actor), at most 8 MB.
ray_logs=$(ls -d /tmp/ray/session_*/logs 2>/dev/null)
for d in $ray_logs; do
  mkdir -p "$LOGS/ray/$(basename "$(dirname "$d")")"
  find "$d" -maxdepth 1 -type f \( -name 'worker-*' -o -name 'raylet.*' -o -name 'python-core-driver-*' \) \
    -size -2M -exec cp {} "$LOGS/ray/$(basename "$(dirname "$d")")/" \;
done
tar -czf "$OUT/logs.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null
if [ "$(stat -c %s "$OUT/logs.tar.gz")" -gt 15000000 ]; then  # the return limit is 16 MiB a file
  tar -czf "$OUT/logs.tar.gz" -C "$(dirname "$LOGS")" --exclude "$(basename "$LOGS")/ray" "$(basename "$LOGS")"
fi
echo -e "\nfinished $(date -u '+%H:%M:%S UTC'); logs: logs.tar.gz ($(du -h "$OUT/logs.tar.gz" | cut -f1))" >> "$RES"
cat "$RES"
