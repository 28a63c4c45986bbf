#!/bin/bash
# Build the SGLang 0.5.16 carry kit for the lent GPUs into .sgl/ (git-ignored): site312.tar.xz, a py3.12
# site tree of SGLang and the pins it needs that the device lacks (tools/device/sglang-kit/requirements.txt,
# installed with --no-deps), and extra1.tar.xz (typing_extensions). ~44 MB, so it travels in one call.
#   bash tools/device/sglang_kit.sh        # from the repo root, on the dev machine (~2 min; needs PyPI)
# Wheels are cached outside the project, in ~/.cache/sglang-kit (sglang-kernel's wheel alone is 383 MB).
# What is left out and why: docs/sglang.md ("The device kit").
set -euo pipefail
cd "$(dirname "$0")/../.."
REQ=tools/device/sglang-kit/requirements.txt
OUTDIR=.sgl; mkdir -p "$OUTDIR" .git/info
grep -qx "/$OUTDIR/" .git/info/exclude 2>/dev/null || echo "/$OUTDIR/" >> .git/info/exclude
C=${XDG_CACHE_HOME:-$HOME/.cache}/sglang-kit; W=$C/wheels; WB=$C/wheels-big; mkdir -p "$W" "$WB"
PLAT="--python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any --only-binary=:all:"
grep -v '^#' "$REQ" | xargs python3 -m pip download -q --no-deps $PLAT -d "$W"
python3 -m pip download -q --no-deps $PLAT -d "$WB" sglang-kernel==0.4.5 typing_extensions==4.16.0
S=$(mktemp -d /tmp/sglkit.XXXX)
python3 -m pip install -q --no-deps --no-compile --no-index --target "$S/site" $PLAT "$W"/*.whl
rm -rf "$S/site/bin" "$S/site/share" "$S/site/xgrammar/lib"          # console scripts, man pages, libxgrammar.a
strip --strip-debug "$S/site/xgrammar/libxgrammar_bindings.so"       # 53 MB -> 3 MB (debug info only)
# sglang-kernel without FA3 (flash_ops, 1.1 GB), sm100 ops, infllm_ops, flashmla_ops: the kit runs Triton attention
unzip -q -o "$WB"/sglang_kernel-0.4.5-*.whl -d "$S/site" -x 'sgl_kernel/flash_ops.abi3.so' 'sgl_kernel/sm100/*' 'sgl_kernel/infllm_ops*' 'sgl_kernel/flashmla_ops*'
tar -C "$S/site" -cf - . | xz -T0 -6 > "$OUTDIR/site312.tar.xz"
mkdir -p "$S/extra" && unzip -q -o "$WB"/typing_extensions-4.16.0-*.whl -d "$S/extra"
tar -C "$S/extra" -cJf "$OUTDIR/extra1.tar.xz" .
rm -rf "$S"; ls -la "$OUTDIR"/*.tar.xz
