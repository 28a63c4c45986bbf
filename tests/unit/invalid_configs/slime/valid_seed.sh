#!/bin/bash
# the seed recipe itself
# slime: runs
# expect: valid
set -euo pipefail
CATALOGUE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${CATALOGUE_DIR}/base/seed.sh"

source "${CATALOGUE_DIR}/base/launch.sh"
