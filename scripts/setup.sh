#!/usr/bin/env bash
# Sets up rlrun in ./.venv. On the CPU dev machine torch comes from the CPU build on local disk
# (torch==2.13.0); installing it first keeps pip from pulling a multi-GB CUDA build.
# --no-compile: pip would byte-compile every .py file of every package (torch's alone: ~7 s of the install here);
# Python compiles the modules a program imports on their first import and caches them in __pycache__.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q --no-compile "torch==${RLRUN_TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q --no-compile -e '.[dev]'
