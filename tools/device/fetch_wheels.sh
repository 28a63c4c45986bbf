#!/usr/bin/env bash
# Download rlrun's GPU-side wheels (2026-11-24 layout: ray part 1 in .wB, the rest of ray,
# megatron-core, pydantic-core and sglang-router in .wC) (cp312, manylinux x86_64) into the git-ignored carry folders
# .wA/ .wB/ .wC/ (tools/device/README.md says what goes where and why: a call carries <= 64 MiB).
#   bash tools/device/fetch_wheels.sh        # from the repo root, on the dev machine
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .git/info
for d in .wA .wB .wC; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
mkdir -p .wA .wB .wC
dl() { local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$dir" "$@"; }
dl .wA hydra-core==1.3.8 omegaconf==2.3.0 pydantic==2.13.4 \
  annotated-types==0.7.0 typing-inspection==0.4.2 math-verify==0.9.0 \
  latex2sympy2_extended==1.10.2
python3 -m pip download -q --no-deps --no-binary=:all: -d .wA antlr4-python3-runtime==4.9.3
# megatron-core, liger-kernel and pydantic-core ride in call 2: call 1 (.wA + .wB + the tree) must stay < 64 MiB
dl .wC megatron-core==0.19.2 liger-kernel==0.8.5 pydantic-core==2.46.4 sglang-router==0.3.2 py-spy==0.4.1 starlette==1.10.0 uvicorn==0.54.0 fastapi==0.165.0 \
  opentelemetry-api==1.39.1 orjson==3.11.4 setproctitle==1.3.7 jsonschema==4.25.1 referencing==0.37.0 \
  rpds-py==0.30.0 jsonschema-specifications==2025.9.1 importlib-metadata==8.7.0 zipp==3.23.0
tmp=$(mktemp -d); dl "$tmp" ray==2.60.0
whl=$(ls "$tmp"/ray-*.whl); name=$(basename "$whl")
split -b 56M "$whl" ".wB/$name.part-"
n=$(ls .wB/"$name".part-* | wc -l); echo "$n" > ".wB/$name.nparts"; cp ".wB/$name.nparts" .wC/
# parts after the first travel in the second call
for p in $(ls .wB/"$name".part-* | tail -n +2); do mv "$p" .wC/; done
rm -rf "$tmp"; du -sh .wA .wB .wC
