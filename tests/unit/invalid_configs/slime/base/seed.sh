#!/bin/bash
# The seed recipe (tests/data/slime/run-qwen3-4B-mi300x.sh: Qwen3-4B GRPO on 8x MI300X, colocated, offload
# off, no gradient-accumulation fusion), read for its arrays; each catalogue script sources this, changes one
# thing, then sources launch.sh, whose launch line is the one the import reads (the last one in a script).
# MODEL_DIR is this folder: its Qwen3-4B/config.json is the public Qwen/Qwen3-4B config, so that
# `rlrun validate` checks model.* against it.
MODEL_DIR="${CATALOGUE_DIR}/base"
source "${CATALOGUE_DIR}/../../../data/slime/run-qwen3-4B-mi300x.sh"

# the seed writes these on its train.py line; an array here so that a case can change the placement
PLACEMENT_ARGS=(
   --actor-num-nodes 1
   --actor-num-gpus-per-node 8
   --colocate
   --no-offload-train
   --no-offload-rollout
)
