#!/usr/bin/env bash
# Install rlrun's GPU-side Python deps on a lent device machine (no registry there) from wheels
# carried in the git-ignored folders .wA/ (megatron-core, hydra, omegaconf, antlr4 sdist, pydantic)
# and .wB/ (ray, split in parts because one call carries at most 64 MiB; see tools/device/README.md).
#
#   source tools/device/stage.sh          # in the device command, from the repo root
#
# Installs into /tmp/site (kept while the machine stays warm) and exports PYTHONPATH=src:/tmp/site.
set -e
SITE=/tmp/site
STAGE=$HOME/stage
mkdir -p "$SITE" "$STAGE"
# Ray's wheel comes in parts (NAME.whl.part-aa, -ab, ... and NAME.whl.nparts) over two calls
# (.wB/ in the first, .wC/ with the sglang-router wheel in the second, while the machine is still
# warm): keep what came in $HOME/stage, join once every part is there.
for p in .wB/* .wC/*; do [ -e "$p" ] && cp -n "$p" "$STAGE/"; done
for n in "$STAGE"/*.nparts; do
  [ -e "$n" ] || continue
  whl="${n%.nparts}"
  if [ ! -e "$whl" ] && [ "$(ls "$whl".part-* 2>/dev/null | wc -l)" = "$(cat "$n")" ]; then
    cat "$whl".part-* > "$whl"
  fi
done
pkgs=()
for f in .wA/*.whl .wA/*.tar.gz "$STAGE"/*.whl; do [ -e "$f" ] && pkgs+=("$f"); done
marker="$SITE/.staged-$(printf '%s\n' "${pkgs[@]}" | md5sum | cut -c1-8)"
if [ ! -e "$marker" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target "$SITE" "${pkgs[@]}"
  touch "$marker"
fi
# rlrun itself runs from the carried working tree (src/ on PYTHONPATH); its dist-info makes
# importlib.metadata.version("rlrun") work as in an installed checkout (the config cache keys on it).
ver=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
mkdir -p "$SITE/rlrun-$ver.dist-info"
printf 'Metadata-Version: 2.1\nName: rlrun\nVersion: %s\n' "$ver" > "$SITE/rlrun-$ver.dist-info/METADATA"
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import megatron.core, hydra, pydantic; print('staged: megatron-core', megatron.core.__version__)"
python3 -c "import ray, sglang_router; print('staged: ray', ray.__version__, '+ sglang-router')" 2>/dev/null || true
