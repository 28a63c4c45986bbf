# The seed recipe's arrays (tests/data/slime/run-qwen3-4B-mi300x.sh, through the slime catalogue's base), with
# --num-layers taken out of MODEL_ARGS by a loop; the form scripts put it back through nested sources and $(( )).
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../../invalid_configs/slime" && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=()
skip=0
for a in "${MODEL_ARGS[@]}"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  if [ "$a" = --num-layers ]; then skip=1; continue; fi
  KEPT+=("$a")
done
MODEL_ARGS=("${KEPT[@]}")
