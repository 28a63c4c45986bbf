#!/usr/bin/env bash
# Sets up rlrun in ./.venv. On the CPU dev machine torch comes from the CPU build on local disk
# (torch==2.13.0); installing it first keeps pip from pulling a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${RLRUN_TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e '.[dev]'
