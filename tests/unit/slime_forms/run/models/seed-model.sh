# sourced as "$(dirname "${BASH_SOURCE[0]}")/models/seed-model.sh"; sources its neighbour the same way
source "$(dirname "${BASH_SOURCE[0]}")/layers.sh"
MODEL_ARGS+=(--num-layers $(( LAYERS_PER_STAGE * STAGES )))
