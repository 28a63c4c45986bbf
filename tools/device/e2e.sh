#!/usr/bin/env bash
# Issue 4/5 GPU acceptance: 3 GRPO steps through Ray on one GPU with the hf engine, once with the
# torch trainer backend and once with the megatron backend (random-init Qwen3-0.6B shape).
#   source tools/device/stage.sh && bash tools/device/e2e.sh
# E2E_MEGATRON_EXTRA="k=v ..." adds overrides to the megatron run (e.g. optim.state_dtype=bf16).
# Run dirs go to /tmp/runs (checkpoints are GBs); each run's log and metrics.jsonl go to $OUT.
OUT=${OUT:-/tmp/out}
common=(hardware=h100 model=qwen3-0.6b checkpoint.random_init=true train.gpus_per_node=1 rollout.num_rollout=3 rollout.rollout_batch_size=8
        rollout.n_samples_per_prompt=4 rollout.max_response_len=64 eval.max_response_len=64
        logging.wandb.mode=disabled rollout.engine=hf run.output_dir=/tmp/runs)
for be in ${BACKENDS:-torch megatron}; do
  extra=(train.backend=$be)
  [ "$be" = megatron ] && extra+=(train.gradient_accumulation_fusion=false ${E2E_MEGATRON_EXTRA:-})
  t0=$(date +%s)
  timeout "${E2E_TIMEOUT:-240}" python3 -c 'import sys; from rlrun.cli import main; sys.exit(main())' \
    "${common[@]}" "${extra[@]}" run.name=e2e-$be > "$OUT/e2e_$be.log" 2>&1
  echo "E2E backend=$be rc=$? wall=$(( $(date +%s) - t0 ))s"
  m=$(ls -t /tmp/runs/e2e-$be/*/metrics.jsonl 2>/dev/null | head -1)
  [ -n "$m" ] && cp "$m" "$OUT/metrics_$be.jsonl" && python3 - "$m" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    keep = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
            if any(s in k for s in ("time", "reward/mean", "rollout/reward", "tokens_per", "train/loss", "grad_norm", "step"))}
    print("E2E", json.dumps(keep))
PY
  tail -5 "$OUT/e2e_$be.log" | grep -i -E "error|exception|traceback" && tail -25 "$OUT/e2e_$be.log"
done
