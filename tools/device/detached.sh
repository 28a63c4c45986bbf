#!/usr/bin/env bash
# Work longer than one device call (10 minutes): start it in a process session of its own, which the device machine
# keeps running after the call returns (until the machine goes back: make the next call within its idle release,
# 30 s, and stay under its 30-minute hold), then wait for it in the calls after.
#
#   source tools/device/stage.sh > /tmp/stage.log 2>&1
#   ITEM_LIMIT=1700 ITEMS=gpu bash tools/device/detached.sh start whole bash tools/device/sglang.sh   # returns at once
#   bash tools/device/detached.sh wait whole 560      # this call and the next ones: until it ends or 560 s pass
#
# The command runs with the caller's environment (stage.sh's exports) and OUT=/tmp/detached/NAME/out, kept across
# calls; its stdout+stderr go to /tmp/detached/NAME/log. `wait` copies both into $OUT/NAME/ (the out folder as one
# archive: a call returns a limited number of files) and exits 0 when the command ended with rc 0, its rc when it
# failed, 3 while it still runs. `status` prints the same without waiting.
set -u
[ $# -ge 2 ] || { echo "usage: detached.sh start NAME CMD... | wait NAME SECONDS | status NAME" >&2; exit 2; }
op=$1 name=$2
shift 2
dir=/tmp/detached/$name
report() {  # copy what the command left into $OUT/NAME and say where it stands
  local o=${OUT:-/tmp/out}/$name
  mkdir -p "$o"
  cp "$dir/log" "$o/log" 2>/dev/null
  [ -d "$dir/out" ] && tar czf "$o/out.tar.gz" -C "$dir" out 2>/dev/null
  tail -n "${TAIL:-25}" "$dir/log" 2>/dev/null
  if [ -s "$dir/rc" ]; then
    echo "DETACHED $name ended rc=$(cat "$dir/rc") after $(( $(date +%s) - $(cat "$dir/t0") ))s"
    return "$(cat "$dir/rc")"
  fi
  if ! kill -0 "$(cat "$dir/pid" 2>/dev/null || echo 0)" 2>/dev/null; then
    echo "DETACHED $name is gone without an exit status (the machine was given back in between?)"
    return 4
  fi
  echo "DETACHED $name still running after $(( $(date +%s) - $(cat "$dir/t0") ))s"
  return 3
}
case $op in
  start)
    [ $# -ge 1 ] || { echo "detached.sh start NAME CMD...: no command" >&2; exit 2; }
    [ -e "$dir/pid" ] && [ ! -s "$dir/rc" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null \
      && { echo "detached.sh: $name is already running (pid $(cat "$dir/pid"))" >&2; exit 2; }
    rm -rf "$dir" && mkdir -p "$dir/out"
    date +%s > "$dir/t0"
    OUT="$dir/out" setsid bash -c 'd=$1; shift; "$@"; echo $? > "$d/rc"' detached "$dir" "$@" \
      > "$dir/log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    echo "DETACHED $name started (pid $!): $*" ;;
  wait)
    limit=${1:?detached.sh wait NAME SECONDS}
    end=$(( SECONDS + limit ))
    while [ ! -s "$dir/rc" ] && [ $SECONDS -lt $end ] && kill -0 "$(cat "$dir/pid" 2>/dev/null || echo 0)" 2>/dev/null; do
      sleep 5
    done
    report ;;
  status) report ;;
  *) echo "detached.sh: unknown operation $op (start, wait, status)" >&2; exit 2 ;;
esac
