#!/bin/bash
# --use-kl-loss without --ref-load
# slime: slime_validate_args: os.path.exists(args.ref_load) with ref_load None (a TypeError)
# expect: slime checkpoint.ref
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
KEPT=(); skip=0; for a in "${CKPT_ARGS[@]}"; do if [ "$skip" -gt 0 ]; then skip=$((skip-1)); continue; fi; if [ "$a" = --ref-load ]; then skip=1; continue; fi; KEPT+=("$a"); done; CKPT_ARGS=("${KEPT[@]}")
source "${CATALOGUE_DIR}/base/launch.sh"
