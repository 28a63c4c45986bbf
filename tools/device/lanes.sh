#!/usr/bin/env bash
# Lanes of tools/device/sglang.sh items at once on one machine, each a view of some of its GPUs:
# LANE_A on GPUs 0,1 and LANE_B on GPUs 2,3 by default (CUDA_VISIBLE_DEVICES; rlrun's placement maps Ray's GPU ids to
# the indices the actors see, tests/integration/test_placement_visible_devices.py), each with its own $OUT/laneX.
# LANE_C and LANE_D run too when set; they need LANE_GPUS_C / LANE_GPUS_D (e.g. four one-GPU lanes on four GPUs:
# LANE_GPUS_A=0 LANE_GPUS_B=1 LANE_GPUS_C=2 LANE_GPUS_D=3).
#
#   source tools/device/stage.sh && LANE_A="py:test_megatron_backend.py,..." LANE_B="async2" bash tools/device/lanes.sh
#
# LANE_GPUS_A / LANE_GPUS_B override the GPUs of each lane (on a two-GPU machine: LANE_GPUS_A=0 LANE_GPUS_B=1).
# WHOLE=1: the py: items of both lanes must name every tests/gpu/test_*.py file (the whole suite on two-GPU views;
# a file in no lane is listed in results.md). LANE_LIMIT (s, default 570) bounds each lane.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "${WHOLE:-0}" = 1 ]; then
  listed=$(for i in ${LANE_A:-} ${LANE_B:-} ${LANE_C:-} ${LANE_D:-}; do case $i in py:*) echo "${i#py:}" | tr ',' '\n' ;; esac; done | sort -u)
  missing=$(comm -23 <(cd tests/gpu && ls test_*.py | sort) <(echo "$listed"))
  echo "lanes.sh: tests/gpu files in no lane: ${missing:-none}" | tee -a "$OUT/results.md"
fi
lane() {  # lane NAME GPUS MASTER_PORT ITEMS
  CUDA_VISIBLE_DEVICES=$2 MASTER_PORT=$3 OUT="$OUT/lane$1" ITEMS="$4" \
    timeout -k 10 "${LANE_LIMIT:-570}" bash tools/device/sglang.sh > "$OUT/lane$1.out" 2>&1
  echo "lane $1 (GPUs $2) rc=$?" >> "$OUT/results.md"
}
[ -n "${LANE_A:-}" ] && lane A "${LANE_GPUS_A:-0,1}" 29533 "$LANE_A" &
[ -n "${LANE_B:-}" ] && lane B "${LANE_GPUS_B:-2,3}" 29733 "$LANE_B" &
[ -n "${LANE_C:-}" ] && lane C "${LANE_GPUS_C:?LANE_C needs LANE_GPUS_C}" 29933 "$LANE_C" &
[ -n "${LANE_D:-}" ] && lane D "${LANE_GPUS_D:?LANE_D needs LANE_GPUS_D}" 30133 "$LANE_D" &
wait
for l in A B C D; do [ -f "$OUT/lane$l/results.md" ] && { echo "## lane $l"; cat "$OUT/lane$l/results.md"; }; done | tee -a "$OUT/results.md"
# one archive per lane: a call returns a limited number of files from $OUT (an engine log was lost to it on 2026-11-28)
for l in A B C D; do [ -d "$OUT/lane$l" ] && tar czf "$OUT/lane$l.tar.gz" -C "$OUT" "lane$l" && rm -rf "${OUT:?}/lane$l"; done
true
