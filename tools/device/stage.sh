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
for p in .wB/* .wC/* .wD/* .sgl/*.tar.xz; do [ -e "$p" ] && cp -n "$p" "$STAGE/"; done
# The SGLang 0.5.16 kit (.sgl/, built by tools/device/sglang_kit.sh: a py3.12 site tree, xz): unpacked
# first, so that its pins (pydantic 2.14.4, transformers 5.12.1, fastapi, ...) win over the same
# packages in .wA/.wC: one version of each package in /tmp/site.
for t in "$STAGE"/*.tar.xz; do
  [ -e "$t" ] || continue
  m="$SITE/.kit-$(basename "$t")"
  [ -e "$m" ] || { tar -C "$SITE" -xJf "$t" && touch "$m"; }
done
for n in "$STAGE"/*.nparts; do
  [ -e "$n" ] || continue
  whl="${n%.nparts}"
  if [ ! -e "$whl" ] && [ "$(ls "$whl".part-* 2>/dev/null | wc -l)" = "$(cat "$n")" ]; then
    cat "$whl".part-* > "$whl"
  fi
done
pkgs=()
have() {  # a distribution already in /tmp/site (from the kit): NAME-VER.whl / NAME-VER.tar.gz
  local n; n=$(basename "$1" | sed -E 's/-[0-9].*//' | tr 'A-Z-.' 'a-z__')
  ls -d "$SITE"/*.dist-info 2>/dev/null | sed -E 's#.*/##; s/-[0-9].*//' | tr 'A-Z-.' 'a-z__' | grep -qx "$n"
}
for f in .wA/*.whl .wA/*.tar.gz "$STAGE"/*.whl; do [ -e "$f" ] && ! have "$f" && pkgs+=("$f"); done
marker="$SITE/.staged-$(printf '%s\n' "${pkgs[@]}" | md5sum | cut -c1-8)"
if [ ${#pkgs[@]} -gt 0 ] && [ ! -e "$marker" ]; then
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
# TRL 1.16.0 for bench/peer_grpo.py (.wT/, and pyarrow in .wP/ where the device lacks it: tools/device/trl_kit.sh;
# kept in $HOME/stage/trl, so the two folders may come in different calls): pip's resolver, in a dry run against what
# is importable now (/tmp/site on PYTHONPATH + the system), names what is missing or too old; only those wheels are
# installed, --no-deps, into /tmp/site.
for p in .wT/*.whl .wP/*.whl; do [ -e "$p" ] && mkdir -p "$STAGE/trl" && cp -n "$p" "$STAGE/trl/"; done
if ls "$STAGE"/trl/trl-*.whl > /dev/null 2>&1; then
  tm="$SITE/.trl-$(ls "$STAGE/trl" | md5sum | cut -c1-8)"
  if [ ! -e "$tm" ]; then
    if python3 -m pip install -q --dry-run --no-index --find-links "$STAGE/trl" --report /tmp/trl-report.json trl==1.16.0; then
      need=$(python3 -c 'import json, urllib.parse; print(" ".join(urllib.parse.unquote(i["download_info"]["url"][7:]) for i in json.load(open("/tmp/trl-report.json"))["install"]))')
      [ -z "$need" ] || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" $need
      touch "$tm"
      echo "stage.sh: TRL staged; installed: $(for w in $need; do basename "$w"; done | tr '\n' ' ')"
    else
      echo "stage.sh: TRL not staged: pip names the missing requirement above (pyarrow: carry .wP, tools/device/trl_kit.sh)"
    fi
  fi
fi
if [ -d "$SITE/sglang" ]; then
  # sgl_kernel's library has no RPATH for the CUDA 13 libraries torch ships (libnvrtc.so.13, ...)
  NVLIBS=$(python3 -c 'import glob, os, torch; sp = os.path.dirname(os.path.dirname(torch.__file__)); print(":".join(sorted({os.path.dirname(p) for p in glob.glob(sp + "/nvidia/**/lib/*.so*", recursive=True)}) + [os.path.join(os.path.dirname(torch.__file__), "lib")]))')
  export LD_LIBRARY_PATH="$NVLIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  [ -z "${CUDA_HOME:-}" ] && [ -n "$NVCC" ] && export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-$HOME/.cache/tvm-ffi}
fi
if python3 -c "import megatron.core, hydra, pydantic; print('staged: megatron-core', megatron.core.__version__)"; then
  # Byte-compile the staged tree once (pip ran with --no-compile): otherwise every trainer rank and engine process
  # of the first run compiles the same megatron-core / SGLang modules at once (a 4-GPU run's start-up, 2026-11-28).
  [ -e "$SITE/.compiled" ] || { python3 -m compileall -q -j 0 "$SITE" > /dev/null 2>&1; touch "$SITE/.compiled"; }
else
  echo "stage.sh: megatron-core not importable yet (carry .wA and .wC: tools/device/README.md)"
fi
python3 -c "import ray, sglang_router; print('staged: ray', ray.__version__, '+ sglang-router')" 2>/dev/null || true
python3 -c "import importlib.metadata as m; print('staged: sglang', m.version('sglang'), 'pydantic', m.version('pydantic'), 'transformers', m.version('transformers'))" 2>/dev/null || true
