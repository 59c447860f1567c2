# shellcheck shell=bash
# Sourced by the GPU bench scripts after they set `dry` (1: print, do not run), `budget` (seconds for the whole call),
# `started` (its start, date +%s) and `out` (the logs' folder); sets `status` to 1 when a command fails.
# run NAME LIMIT_S COMMAND...: runs it under timeout with what is left of the budget (at most LIMIT_S), logging to
# OUT/NAME.log; skipped when fewer than LIMIT_S / 2 seconds are left. A dry run prints the command instead.
run() {
  local name="$1" limit="$2"
  shift 2
  if [ "$dry" = 1 ]; then
    echo "$name: would run (at most $limit s): $*"
    return
  fi
  local left=$((budget - ($(date +%s) - started)))
  if [ "$left" -lt $((limit / 2)) ]; then
    echo "$name: skipped, ${left} s of the budget left"
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" </dev/null >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(($(date +%s) - t0)) s"
  if [ $rc -ne 0 ]; then
    status=1
    grep -v "^  " "$out/$name.log" | tail -3
  fi
}
