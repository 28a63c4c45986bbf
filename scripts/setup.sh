#!/usr/bin/env bash
# Sets up rlrun in ./.venv. On the CPU dev machine torch comes from the CPU build on local disk
# (torch==2.13.0); installing it first keeps pip from pulling a multi-GB CUDA build.
# --no-compile, then one parallel compileall: pip byte-compiles each package's files serially as it installs it;
# compileall -j 0 does them all at once on every core. The .pyc files must be written here: where
# PYTHONDONTWRITEBYTECODE is set (this dev machine's shells set it), Python never caches what it compiles on
# import, and every process (each Ray worker, trainer rank, engine, CLI subprocess) compiled torch, transformers
# and ray from source again: ~6 CPU-seconds a process, the test suite 30 min instead of ~20 (docs/benchmarks.md,
# "Byte-compiled once at setup"). -qq: a package's files that do not parse on this Python (torch ships one for
# 3.12's syntax) are left uncompiled, as pip leaves them; they fail only if imported.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q --no-compile "torch==${RLRUN_TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q --no-compile -e '.[dev]'
.venv/bin/python -m compileall -qq -j 0 .venv/lib src >/dev/null || true
