#!/usr/bin/env bash
# The checks `make test` runs once scripts/test-setup.sh has made the venv and installed the
# system packages: ruff and mypy, the suite on parallel workers, and the tests on the emulated
# WAN (marker `wan`). Exits non-zero if any of the three failed; each runs whatever the others do.
#
# The suite keeps both cores busy; the WAN tests use a third of one (they wait on the emulated
# link) but measure rates and round trips through a userspace emulator, so they must not share
# the CPU evenly with the rest. As root they run beside the rest in their own pytest process at
# nice -15 and the highest best-effort I/O level: the scheduler gives them the CPU they ask for
# (at nice -15 a process weighs about 30 times one at nice 0) and the suite takes what they
# leave. Run alone after the rest, they added 4 minutes to the run. Not as root (they fail
# and say what to do), or with WAN_PHASE=after, they run alone after the rest.
# ruff and mypy (one core for half a minute) run beside the tests too; their output follows.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
WORKERS="${TEST_WORKERS:-3}"
common=(-q -p no:cacheprovider --timeout=900 --durations=15)
logs="$(mktemp -d "${TMPDIR:-/tmp}/at-test-run.XXXXXX")"
trap 'rm -rf "$logs"' EXIT

wan_beside=0
if [ "$(id -u)" -eq 0 ] && [ "${WAN_PHASE:-beside}" = "beside" ]; then wan_beside=1; fi

s=0
if [ "$wan_beside" -eq 1 ]; then
  nice -n -15 ionice -c 2 -n 0 "$PY" -m pytest "${common[@]}" -m wan >"$logs/wan" 2>&1 &
  wan_pid=$!
fi
bash scripts/lint.sh >"$logs/lint" 2>&1 &
lint_pid=$!
# --dist loadfile keeps a module on one worker, so its sshd, Airflow home or api-server start
# once; --no-loadscope-reorder keeps the order tests/conftest.py gives (longest modules first)
# instead of xdist's most-tests-first. Three workers on two cores: many tests wait on round
# trips, sshd and Airflow processes (four were no faster).
"$PY" -m pytest "${common[@]}" -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not wan" || s=1
lint_status=0
wait "$lint_pid" || lint_status=1
echo "== ruff and mypy (scripts/lint.sh): $([ "$lint_status" -eq 0 ] && echo passed || echo FAILED) =="
cat "$logs/lint"
[ "$lint_status" -eq 0 ] || s=1
if [ "$wan_beside" -eq 1 ]; then
  wait "$wan_pid" || s=1
  echo "== tests on the emulated WAN (run beside the rest, at high priority) =="
  cat "$logs/wan"
else
  "$PY" -m pytest "${common[@]}" -m wan || s=1
fi
exit $s
