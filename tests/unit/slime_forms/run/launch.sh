# A launch as slime's newer scripts write it: heredoc runtime env, `python3 -u train.py`, an array never assigned
RUNTIME_ENV_JSON=$(cat <<EOF_JSON
{"env_vars": {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_NVLS_ENABLE": "${HAS_NVLINK}", "FORMS_HAS_NVLINK": "${HAS_NVLINK}"}}
EOF_JSON
)
ray job submit --address="http://127.0.0.1:8265" --runtime-env-json="${RUNTIME_ENV_JSON}" \
   -- python3 -u train.py \
   ${PLACEMENT_ARGS[@]} ${MODEL_ARGS[@]} ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${OPTIMIZER_ARGS[@]} \
   ${GRPO_ARGS[@]} ${WANDB_ARGS[@]} ${PERF_ARGS[@]} ${EVAL_ARGS[@]} ${SGLANG_ARGS[@]} ${MISC_ARGS[@]}
