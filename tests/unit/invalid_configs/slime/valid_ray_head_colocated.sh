#!/bin/bash
# one Ray head of 8 GPUs; the seed's colocated trainer of 8
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"
ray start --head --node-ip-address 127.0.0.1 --num-gpus 8 --disable-usage-stats
source "${CATALOGUE_DIR}/base/launch.sh"
