#!/usr/bin/env bash
# Issue 22 on the lent GPU: rlrun's production path with the real SGLang 0.5.16 (kit in .sgl/,
# tools/device/sglang_kit.sh) and the Megatron trainer. After the three staging calls
# (tools/device/README.md: .sgl, then .wB, then .wC + .wA), in as few calls as the 10-minute limit allows:
#
#   source tools/device/stage.sh && ITEMS="tests" bash tools/device/sglang.sh
#
# Items (ITEMS picks and orders; each runs under tools/device/watchdog.py with its own limit, output
# streamed to $OUT/ITEM.log; a summary line per item in $OUT/results.md):
#   tests      tests/gpu/test_sglang_engine.py: every SGLang endpoint rlrun uses, through rlrun's launch
#              code and the real router (one server start + one restart)                   ~250 s
#   flat       tests/gpu/test_sglang_flattened_sync.py: the colocated tensor push of a Qwen3-0.6B-shaped state by
#              flattened CUDA IPC buckets (GB/s of both forms; log-probs vs transformers after)       ~150 s
#   twonode    tests/gpu/test_sglang_two_node_engine.py: one engine as two SGLang processes (--nnodes 2,
#              TP 2 over 2 GPUs of one host; needs kind nvidia-h100-x2)                          ~250 s
#   learn      `rlrun experiment=copy-grpo-h100`: Megatron + SGLang colocated, 150 GRPO steps on the
#              3-digit copy task; the reward curve and per-phase times                       ~300 s
#   hfstep     the same job, 6 rollouts, with rollout.engine=hf (per-phase times to compare)   ~120 s
#   lora       `rlrun experiment=copy-grpo-lora-h100`: learn's job with a rank-8 LoRA adapter in the Megatron
#              trainer (merged weights pushed to SGLang); the reward curve to compare with learn's  ~300 s
#   distill    issue 35: a copy-task teacher SFT-trained with the torch backend (HF dir), then copy-grpo-h100's random-init
#              student distilled from it through Megatron + SGLang (SFT_STEPS 60, DISTILL_ROLLOUTS 60)        ~300 s
#   loratest   tests/gpu/test_gpu_megatron_lora.py: the megatron backend's LoRA against the base model and peft  ~90 s
#   nccl       tests/gpu/test_sglang_nccl_sync.py: NCCL weight sync trainer (GPU 0) -> SGLang (GPU 1); 2 GPUs  ~200 s
#   async2     the copy task disaggregated + async on 2 GPUs, default weight sync (NCCL): reward and phases  ~300 s
#   sync2      the same job synchronous, SYNC_ROLLOUTS rollouts (default 60): the sync vs async step time  ~200 s
#              (ASYNC_ROLLOUTS, default 150, and ASYNC_EXTRA, e.g. rollout.max_staleness=1, for async2 only)
#   throughput bench/sglang_throughput.py: SGLang alone vs client -> router -> engine, GRPO groups and single  ~300 s
#   fp8        issue 36: tests/gpu/test_sglang_fp8.py: SGLang on rlrun's FP8 dir, the quantizing push, log-probs vs
#              transformers bf16 (the mismatch FP8 adds)                                     ~120 s
#   r3         issue 36: copy-grpo-h100 with model=tiny-moe, rollout.routing_replay true then false (R3_ROLLOUTS,
#              default 12): train/train_rollout_logp_abs_diff with and without routing replay, the distinct engine
#              log-probs (1 = uniform logits: a head never loaded), then tests/gpu/test_megatron_routing_replay.py
#                                                                                            ~2 x 150 + 120 s
#   fp8bench   bench/sglang_throughput.py on FP8_MODEL (default qwen3-4b): FP8_WAYS (bf16 fp8 fp8dg) tokens/s  ~3 x 140 s
#   gpu        the whole tests/gpu suite in one pytest (ITEM_LIMIT, default 560; on two GPUs it takes ~20 minutes: run it
#              under tools/device/detached.sh, which outlives the call), a junit XML and the tests' engine logs   ~20 min
#   steps      per-phase step times, Qwen3-0.6B/1.7B/4B shapes colocated (SHAPES=...)         ~150 s each
#              (shape = model x batch x response length: 0.6b 32x8x512, 1.7b 16x8x1024, 4b 16x4x256)
#   lay:A,B    tests/gpu/test_gpu_multi_layouts.py, the layouts named A and B only (one rlrun run each, every run's
#              log, metrics and nvidia-smi peaks kept in $OUT/layouts/; LAYOUT_TIMEOUT_S bounds each run, default 540)
#   py:A,B     pytest of tests/gpu/A and tests/gpu/B (file names, comma-separated): tools/device/lanes.sh splits the
#              whole tests/gpu over GPU pairs this way and checks that every file is in one lane
#   predict    the plan's predicted vs measured per phase for the newest steps-* runs (issue 38;
#              tools/device/predict_vs_measured.py: shipped constants and leave-one-out fits), $OUT/predict.md
#              and $OUT/calibration.fitted.yaml (the fit to all of them)                      ~5 s
#   peer       bench/peer_grpo.py: issue 33's job (random-init Qwen3-0.6B, 16x8 samples, 256 tokens, lr 1e-5) in rlrun
#              (Megatron + SGLang colocated) and in TRL 1.16.0's GRPOTrainer, same call: both per-phase tables
#              (median of steps 2-8 of PEER_STEPS, default 9) and rlrun/TRL; needs .wT/ (tools/device/trl_kit.sh)   ~330 s
#   peer_reward  the same bench's time to a 10-rollout mean reward of 0.8 on the copy task (experiment=copy-grpo-h100)
#              for both, up to PEER_MAX_STEPS rollouts each (default 150)                            ~400 s
#              (the two items together pass the 10-minute limit of a call: one call each)
# LEARN_EXTRA / STEPS_EXTRA / PEER_EXTRA add overrides; STEPS_HW names the hardware profile of the steps item (h100;
# h200 on the lent H200s, whose 141 GiB the h100 profile does not know).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/runs
RES=$OUT/results.md
ITEMS=${ITEMS:-tests learn}
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
RLRUN=(python3 -c 'import sys; from rlrun.cli import main; sys.exit(main())')
KIT=(+rollout.sglang.attention_backend=triton +rollout.sglang.sampling_backend=pytorch)  # the kit has no FA3
# learning/loop runs: no piecewise CUDA graphs for prefill either (their capture took 65 s of each engine start,
# 2026-11-28; the copy task's prompts are 4 tokens). The throughput and steps items keep SGLang's default.
KIT_FAST=("${KIT[@]}" +rollout.sglang.disable_piecewise_cuda_graph=true)
echo "# tools/device/sglang.sh $(date -u '+%Y-%m-%d %H:%M UTC') items: $ITEMS" >> "$RES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$RES" 2>&1

run() {  # run NAME LIMIT CMD...
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  python3 tools/device/watchdog.py --limit "$limit" --log "$OUT/$name.log" --name "$name" -- "$@"
  rc=$?
  echo "ITEM $name rc=$rc wall=$((SECONDS - t0))s" | tee -a "$RES"
  return $rc
}

summary() {  # summary RUN_NAME: the reward curve and per-phase means of the newest run dir of that name
  local m
  m=$(ls -t /tmp/runs/"$1"/*/metrics.jsonl 2>/dev/null | head -1)
  [ -n "$m" ] || { echo "no metrics for $1" | tee -a "$RES"; return; }
  cp "$m" "$OUT/metrics_$1.jsonl"
  python3 - "$m" <<'PY' | tee -a "$RES"
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
r = [row["rollout/reward_mean"] for row in rows if "rollout/reward_mean" in row]
print("rewards every 10th:", [round(x, 3) for x in r[::10]], "last:", round(r[-1], 3) if r else None)
k = min(10, len(r) // 2) or 1
print(f"first{k} {statistics.fmean(r[:k]):.3f} last{k} {statistics.fmean(r[-k:]):.3f} over {len(r)} rollouts")
keys = sorted(k for k in rows[-1] if k.startswith(("time/", "perf/", "weight_sync/", "offload/", "train/train_rollout",
                                                    "train/routing")))
print("means after the first rollout:", {k: round(statistics.fmean(row[k] for row in rows[1:] if k in row), 4)
                                         for k in keys})
PY
}

for item in $ITEMS; do
  case $item in
    tests) run tests 330 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_sglang_engine.py ;;
    nccl) NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM run nccl 300 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_sglang_nccl_sync.py \
            || { NCCL_OK=0; grep -E "SGLANG NCCL|WeightSyncStuck|NCCL (WARN|INFO) (Init|Channel|comm)|Error" "$OUT/nccl.log" | head -40 | tee -a "$RES"; }
          grep -E "SGLANG NCCL" "$OUT/nccl.log" | tee -a "$RES" ;;
    async2|sync2)  # issue 32: the copy task disaggregated on two GPUs (trainer GPU 0, engine GPU 1), default weight sync
      [ "${NCCL_OK:-1}" = 0 ] && { echo "ITEM $item skipped: the nccl item failed" | tee -a "$RES"; continue; }
      mode="train.async_train=false rollout.num_rollout=${SYNC_ROLLOUTS:-60}"
      [ "$item" = async2 ] && mode="train.async_train=true rollout.num_rollout=${ASYNC_ROLLOUTS:-150} ${ASYNC_EXTRA:-}"
      run "$item" "${ITEM_LIMIT:-480}" "${RLRUN[@]}" experiment=copy-grpo-h100 "${KIT_FAST[@]}" train.colocate=false rollout.num_gpus=1 \
        $mode run.name="copy-$item" run.output_dir=/tmp/runs ${LEARN_EXTRA:-}
      summary "copy-$item"
      tail -c 3000 "$OUT/$item.log" | grep -i -E "error|traceback|stuck" && tail -30 "$OUT/$item.log" ;;
    flat) run flat 330 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_sglang_flattened_sync.py
          grep -E "SGLANG (tensor push|after)" "$OUT/flat.log" | tee -a "$RES" ;;
    twonode) run twonode 420 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_sglang_two_node_engine.py ;;
    learn) run learn 560 "${RLRUN[@]}" experiment=copy-grpo-h100 "${KIT_FAST[@]}" run.output_dir=/tmp/runs ${LEARN_EXTRA:-}
           summary copy-grpo-h100
           tail -c 3000 "$OUT/learn.log" | grep -i -E "error|traceback" && tail -40 "$OUT/learn.log" ;;
    lora) run lora 560 "${RLRUN[@]}" experiment=copy-grpo-lora-h100 "${KIT_FAST[@]}" run.output_dir=/tmp/runs ${LEARN_EXTRA:-}
          summary copy-grpo-lora-h100
          tail -c 3000 "$OUT/lora.log" | grep -i -E "error|traceback" && tail -40 "$OUT/lora.log" ;;
    distill)  # issue 35: on-policy distillation through Megatron + SGLang. The teacher: the tiny model SFT-trained on the
              # copy task (torch backend, which writes an HF dir); the student: copy-grpo-h100's random-init model learning
              # from the teacher's per-token log-probs alone (reward=replace: rewards scored and logged, not trained on; no
              # entropy bonus)
      run distill_sft 240 "${RLRUN[@]}" experiment=tiny-sft-cpu hardware=h100 train.gpus_per_node=1 train.backend=torch \
        data.toy_task=copy data.rm_type=char_match rollout.num_rollout="${SFT_STEPS:-60}" run.name=distill-teacher \
        run.output_dir=/tmp/runs logging.wandb.mode=disabled
      teacher=$(ls -d /tmp/runs/distill-teacher/*/checkpoints/iter_*/trainer/model 2>/dev/null | tail -1)
      [ -n "$teacher" ] || { echo "distill: no teacher checkpoint" | tee -a "$RES"; continue; }
      run distill 420 "${RLRUN[@]}" experiment=copy-grpo-h100 algo.distill.teacher="$teacher" algo.distill.reward=replace \
        algo.normalize_advantages=true algo.entropy_coef=0.0 rollout.num_rollout="${DISTILL_ROLLOUTS:-60}" "${KIT_FAST[@]}" \
        run.name=distill-student run.output_dir=/tmp/runs ${LEARN_EXTRA:-}
      summary distill-student ;;
    loratest) run loratest 300 python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_gpu_megatron_lora.py
              grep -E "^LORA|passed|failed" "$OUT/loratest.log" | tee -a "$RES" ;;
    hfstep) run hfstep 240 "${RLRUN[@]}" experiment=copy-grpo-h100 rollout.engine=hf \
              rollout.num_rollout=6 run.name=copy-hf run.output_dir=/tmp/runs
            summary copy-hf ;;
    throughput) # GRPO groups (8 prompts x 8 samples: a group is one batched request), then the earlier form (64
                # different prompts, one request each); one engine start each
                run throughput 300 python3 bench/sglang_throughput.py --model qwen3-0.6b --prompts 8 --n 8 --new 256 --repeat 3
                run throughput_single 300 python3 bench/sglang_throughput.py --model qwen3-0.6b --prompts 64 --n 1 \
                  --new 256 --repeat 3
                grep -hE '^\{' "$OUT/throughput.log" "$OUT/throughput_single.log" | tee -a "$RES" ;;
    r3)  # issue 36: rollout routing replay end to end, a small MoE (model=tiny-moe: Qwen3-MoE, 8 experts, top-2) through
         # Megatron + SGLang colocated, replay on then off: the train vs rollout log-prob mismatch of each
         for rr in true false; do
           run "r3_$rr" 300 "${RLRUN[@]}" experiment=copy-grpo-h100 model=tiny-moe rollout.routing_replay=$rr \
             rollout.num_rollout="${R3_ROLLOUTS:-12}" "${KIT_FAST[@]}" run.name="r3-$rr" run.output_dir=/tmp/runs ${LEARN_EXTRA:-}
           summary "r3-$rr"
           # the per-rollout mismatch, and whether the engine served a real model: a head it never loaded gives
           # uniform logits, every log-prob -ln(vocab) (one distinct value; seen with a tied tiny-moe, now refused)
           python3 - "r3-$rr" <<'PY' | tee -a "$RES"
import glob, json, os, sys
import pyarrow.parquet as pq
d = max(glob.glob(f"/tmp/runs/{sys.argv[1]}/*/"), key=os.path.getmtime)
diffs = [json.loads(l).get("train/train_rollout_logp_abs_diff") for l in open(d + "metrics.jsonl")]
lps = {round(x, 6) for f in glob.glob(d + "rollouts/rollout_*.parquet")
       for row in pq.read_table(f, columns=["rollout_logprobs"]).column(0).to_pylist() for x in row or []}
print(f"R3 {sys.argv[1]}: logp_abs_diff per rollout {[round(x, 5) for x in diffs if x is not None]}; "
      f"distinct engine log-probs in the records {len(lps)}")
PY
         done
         # megatron's replay against the torch backend's with the same experts (never run on the lent GPUs before)
         run r3_megatron 240 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_megatron_routing_replay.py
         grep -E '^R3|passed|failed' "$OUT/r3_megatron.log" | tee -a "$RES" ;;
    fp8) run fp8 330 python3 -m pytest -x -q -s -rs -p no:cacheprovider tests/gpu/test_sglang_fp8.py
         grep -E '^SGLANG|passed|failed' "$OUT/fp8.log" | tee -a "$RES" ;;
    fp8bench) # FP8_WAYS: bf16, fp8 (SGLang's auto FP8 GEMM: DeepGEMM when deep_gemm imports, else its Triton kernel), fp8dg
              # (DeepGEMM asked for: SGLang fails loudly without it; JIT-compiled with the device's nvcc, fast warm-up)
           for w in ${FP8_WAYS:-bf16 fp8 fp8dg}; do
             case $w in
               bf16) f=() ;; fp8) f=(--fp8) ;; fp8dg) f=(--fp8 --sglang fp8_gemm_runner_backend=deep_gemm) ;;
               *) echo "fp8bench: unknown way $w (bf16 | fp8 | fp8dg)" | tee -a "$RES"; continue ;;
             esac
             SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1 SGLANG_DG_CACHE_DIR=/tmp/dgcache \
               run "fp8bench_$w" 280 python3 bench/sglang_throughput.py --model "${FP8_MODEL:-qwen3-4b}" --prompts 64 \
               --n 1 --new 256 --repeat 3 "${f[@]}"
             grep -E '^\{' "$OUT/fp8bench_$w.log" | tee -a "$RES"
             grep -m8 -E "FP8 GEMM lines|DeepGEMM|deep_gemm|DEEPGEMM|W8A8 Block FP8" "$OUT/fp8bench_$w.log" | cut -c1-300 | tee -a "$RES"
           done ;;
    gpu) mkdir -p /tmp/pyt  # the whole suite in one pytest; past a call's 10 minutes under tools/device/detached.sh
         run gpu "${ITEM_LIMIT:-560}" python3 -m pytest -q -rs -p no:cacheprovider --durations=40 \
           --junitxml "$OUT/gpu.xml" --basetemp /tmp/pyt/gpu tests/gpu
         find /tmp/pyt/gpu -name '*.log' -size -20M 2>/dev/null | tar czf "$OUT/gpu_logs.tgz" -T - 2>/dev/null
         grep -E "passed|failed|error" "$OUT/gpu.log" | tail -5 | tee -a "$RES" ;;
    steps) for shape in ${SHAPES:-qwen3-0.6b qwen3-1.7b qwen3-4b}; do
             # Qwen3-4B's full-precision state (110 GiB planned) does not fit one H100: the memory gate refuses it
             lean=""; [ "$shape" = qwen3-4b ] && lean="train.recompute.granularity=full train.recompute.method=uniform \
               train.recompute.num_layers=1 optim.state_dtype=bf16 train.fp32_grads=false"
             case $shape in  # three shapes (model x batch x response length) for the cost model (issue 38)
               qwen3-1.7b) batch="rollout.rollout_batch_size=16 rollout.n_samples_per_prompt=8 rollout.max_response_len=1024" ;;
               qwen3-4b) batch="rollout.rollout_batch_size=16 rollout.n_samples_per_prompt=4 rollout.max_response_len=256" ;;
               *) batch="rollout.rollout_batch_size=32 rollout.n_samples_per_prompt=8 rollout.max_response_len=512" ;;
             esac
             # the device's disk (64 GiB) holds earlier runs' checkpoints: a 4B run's final save (34 GiB) was refused
             # by the preflight on 25 GiB free (2026-11-29); drop their big files, keep their metrics and logs
             find /tmp/runs -type f -size +50M -delete 2>/dev/null
             run "steps_$shape" 300 "${RLRUN[@]}" hardware="${STEPS_HW:-h100}" model=$shape model.vocab_size=64 data=toy \
               checkpoint.random_init=true parallelism.tp=1 rollout.gpus_per_engine=1 train.gpus_per_node=1 train.gradient_accumulation_fusion=false rollout.engine=sglang \
               rollout.num_rollout=4 $batch rollout.mem_fraction_static=0.4 \
               "${KIT[@]}" \
               logging.wandb.mode=disabled \
               run.name=steps-$shape run.output_dir=/tmp/runs $lean ${STEPS_EXTRA:-}
             summary steps-$shape
           done ;;
    peer|peer_reward)  # rlrun's side with the kit's kernels and no piecewise prefill graphs (start-up only: prompts are <= 6 tokens)
      python3 -c "import trl" 2>/dev/null || { echo "ITEM $item skipped: trl not staged (carry .wT: tools/device/trl_kit.sh)" | tee -a "$RES"; continue; }
      # shellcheck disable=SC2206  # PEER_ARGS is split into flags on purpose
      what=(--steps "${PEER_STEPS:-9}" ${PEER_ARGS:-})  # PEER_ARGS: more bench flags, e.g. --trl-micro-batch 64
      # shellcheck disable=SC2206
      [ "$item" = peer_reward ] && what=(--skip-speed --to-reward 0.8 --max-steps "${PEER_MAX_STEPS:-150}" ${PEER_ARGS:-})
      kit=("${KIT_FAST[@]}"); case " ${PEER_ARGS:-} " in *" --device cpu "*) kit=() ;; esac  # the item's CPU check
      run "$item" "${ITEM_LIMIT:-570}" python3 bench/peer_grpo.py "${what[@]}" --out /tmp/runs -- "${kit[@]}" ${PEER_EXTRA:-}
      sed -n '/^## /,$p' "$OUT/$item.log" | grep -v '^PEER_RESULT' | tee -a "$RES"
      grep '^PEER_RESULT' "$OUT/$item.log" | cut -c13- > "$OUT/$item.json"
      tail -c 3000 "$OUT/$item.log" | grep -i -E "error|traceback" && tail -40 "$OUT/$item.log" ;;
    predict) dirs=$(for d in /tmp/runs/steps-*; do ls -td "$d"/*/ 2>/dev/null | head -1; done)
             if [ -n "$dirs" ]; then
               python3 tools/device/predict_vs_measured.py $dirs --out "$OUT" 2>&1 | tee -a "$RES"
             else
               echo "predict: no steps-* runs in /tmp/runs (run ITEMS=steps first, on the same warm machine)" | tee -a "$RES"
             fi ;;
    lay:*) k=$(echo "${item#lay:}" | sed 's/,/ or /g')
           LAYOUT_LOG_DIR="$OUT/layouts" run "lay_$(echo "${item#lay:}" | tr ',' '_')" "${ITEM_LIMIT:-580}" \
             python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_gpu_multi_layouts.py -k "$k"
           grep -hE "^(LAYOUT|  )|passed|failed|error" "$OUT"/lay_*.log | grep -v "^  warnings" | tail -30 | tee -a "$RES" ;;
    py:*) files=(); IFS=, read -ra names <<< "${item#py:}"
          for f in "${names[@]}"; do files+=("tests/gpu/$f"); done
          name=$(echo "${item#py:}" | tr ',' '\n' | sed 's/^test_//; s/\.py$//' | head -3 | paste -sd_ | tr -c 'A-Za-z0-9_\n' '_')
          # the tests' own temp dirs under a known root, so their server logs (each SGLang engine's) come back in
          # one archive: an engine that never became healthy in a lane left nothing to read (2026-11-28, twice)
          mkdir -p /tmp/pyt  # pytest makes --basetemp itself, not its parents
          run "py_$name" "${ITEM_LIMIT:-560}" python3 -m pytest -q -s -rs -p no:cacheprovider \
            --basetemp "/tmp/pyt/py_$name" "${files[@]}"
          find "/tmp/pyt/py_$name" -name '*.log' -size -20M 2>/dev/null | tar czf "$OUT/py_${name}_logs.tgz" -T - 2>/dev/null
          grep -E "^(LAYOUT|  |SGLANG)|passed|failed|error" "$OUT/py_$name.log" | grep -v "^  warnings" | tail -40 | tee -a "$RES" ;;
    *) echo "unknown item $item" | tee -a "$RES" ;;
  esac
done
tar -C /tmp/runs -czf "$OUT/runs_logs.tar.gz" --exclude='*.safetensors' --exclude='checkpoints' --exclude='*.pt' . 2>/dev/null
