#!/usr/bin/env bash
# Issue 18 GPU acceptance: the GRPO loop learns on one GPU with both trainer backends.
# A Qwen3-0.6B-shape body (28 layers, hidden 1024, 16/8 heads) with the toy tokenizer's vocab
# (model.vocab_size=64), on the toy echo task (answer the prompt's last digit): at random init about
# 1 sample in 50 is right, so GRPO groups carry signal from the first rollout (with the real
# 151936-token vocab every reward is 0 and no gradient flows: the old e2e.sh's blind spot).
#   source tools/device/stage.sh && bash tools/device/learn.sh
# LEARN_ROLLOUTS (default 30), LEARN_LR (1e-4), BACKENDS ("torch megatron"), LEARN_EXTRA (overrides).
OUT=${OUT:-/tmp/out}
common=(hardware=h100 model=qwen3-0.6b checkpoint.random_init=true model.vocab_size=64 data=toy train.gpus_per_node=1 rollout.engine=hf
        rollout.num_rollout=${LEARN_ROLLOUTS:-30} rollout.rollout_batch_size=16 rollout.n_samples_per_prompt=8
        rollout.max_response_len=1 eval.max_response_len=1 optim.lr=${LEARN_LR:-1e-4} optim.weight_decay=0.0
        checkpoint.save_interval=null logging.wandb.mode=disabled run.output_dir=/tmp/runs)
for be in ${BACKENDS:-torch megatron}; do
  extra=(train.backend=$be)
  [ "$be" = megatron ] && extra+=(train.gradient_accumulation_fusion=false)
  t0=$(date +%s)
  timeout "${LEARN_TIMEOUT:-280}" python3 -c 'import sys; from rlrun.cli import main; sys.exit(main())' \
    "${common[@]}" "${extra[@]}" ${LEARN_EXTRA:-} run.name=learn-$be > "$OUT/learn_$be.log" 2>&1
  echo "LEARN backend=$be rc=$? wall=$(( $(date +%s) - t0 ))s"
  m=$(ls -t /tmp/runs/learn-$be/*/metrics.jsonl 2>/dev/null | head -1)
  [ -n "$m" ] && cp "$m" "$OUT/learn_metrics_$be.jsonl" && python3 - "$m" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
r = [row["rollout/reward_mean"] for row in rows]
print("LEARN rewards", [round(x, 3) for x in r])
if len(r) >= 10:
    print(f"LEARN first5 {statistics.fmean(r[:5]):.3f} last5 {statistics.fmean(r[-5:]):.3f} "
          f"delta {statistics.fmean(r[-5:]) - statistics.fmean(r[:5]):+.3f} over {len(r)} rollouts")
keys = sorted(k for k in rows[-1] if k.startswith("time/"))
print("LEARN time means (s):", {k: round(statistics.fmean(row[k] for row in rows[1:] if k in row), 3) for k in keys})
print("LEARN grad_norm", [round(row.get("train/grad_norm", float("nan")), 3) for row in rows][:10], "...")
PY
  grep -i -E "error|exception|traceback" "$OUT/learn_$be.log" | head -3 && tail -25 "$OUT/learn_$be.log"
done
