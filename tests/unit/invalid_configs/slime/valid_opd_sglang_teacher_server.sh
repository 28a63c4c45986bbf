#!/bin/bash
# on-policy distillation from a teacher on its own SGLang server, as slime's
# examples/on_policy_distillation/run-qwen3-8B-opd.sh spells it (--opd-type sglang, slime's OPD reward and
# post-process functions posting to --rm-url)
# rlrun: algo.distill.where=engine, algo.distill.url=the --rm-url, algo.distill.reward=replace, data.rm_type=zero
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
GRPO_ARGS+=(--use-opd --opd-type sglang --opd-kl-coef 1.0)
ROLLOUT_ARGS+=(
   --custom-rm-path slime.rollout.on_policy_distillation.reward_func
   --custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards
   --rm-url http://127.0.0.1:13141/generate
)
source "${CATALOGUE_DIR}/base/launch.sh"
