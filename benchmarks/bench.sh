#!/usr/bin/env bash
# airflow-transfer against rclone, OpenSSH sftp/scp, rsync, lftp, Airflow's SFTPHook and
# fsspec sshfs on the emulated WAN (docs/benchmarks.md). Run as root from any
# directory of a clean clone; installs what it needs (idempotent).
#
#   benchmarks/bench.sh quick [extra benchmarks.run options]   # wan50, small + large at 1/10 scale, every contender once (about 5 min)
#   benchmarks/bench.sh full  [extra benchmarks.run options]   # every profile x dataset x matrix contender, 3 repetitions
#
# The matrix contenders (group `matrix`, benchmarks/contenders/__init__.py): airflow-transfer's
# auto, the other tools that came within 25 % of a cell's best in the 2026-11-25 matrix, and lftp.
# A later --contenders (e.g. `full --contenders wide`, or `matrix,downloads`) replaces the set.
#
# The full matrix needs hours of a quiet machine: each call runs for at most
# BENCH_BUDGET_MIN minutes (default 45) and the next call continues where it
# stopped (--resume), every cell's first run before any cell's second;
# BENCH_RESTART=1 starts the matrix afresh. A run still going after 120 s is
# stopped (under 15 % of the link for a 1 GiB set) and its cell not repeated; that is a
# result, not an error: the exit status is 1 only when a run failed.
#
# Results: full -> benchmarks/results/latest.json (+ latest-details.json, report.md,
# throughput-*.png), and the table in docs/benchmarks.md is refreshed from them;
# quick -> benchmarks/results/quick/ (same files).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
case "$mode" in
  quick|full) shift ;;
  *) echo "usage: benchmarks/bench.sh quick|full [options for python -m benchmarks.run]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "bench.sh: needs root (network namespaces, TUN devices, apt): run: sudo benchmarks/bench.sh $mode" >&2
  exit 1
fi

# The contenders' tools, the test sshd and its user, the link emulator's needs, the venv and
# the Python packages only the benchmark uses.
bash scripts/install-bench-deps.sh
PY=.venv/bin/python

load="$(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$mode" = quick ]; then
  # One run per contender on a tenth of each dataset; a 15 s limit per run keeps the
  # slowest tools from dominating (their partial rate is still reported).
  args=(--profile wan50 --datasets small,large --scale 0.1 --contenders all --reps 1 --timeout 15
        --out benchmarks/results/quick
        --note "Quick run: one repetition per contender on 1/10 of each dataset (load average ${load} when it started): indicative figures only.")
else
  resume=(--resume)
  [ "${BENCH_RESTART:-0}" = 1 ] && resume=()
  # lan before wan100: the cheaper profile first, so a budgeted call gives figures to more cells.
  args=(--profile wan50,lan,wan100 --datasets all --contenders matrix --reps 3 --timeout 120
        "${resume[@]}" --budget-min "${BENCH_BUDGET_MIN:-45}")
fi
status=0
"$PY" -m benchmarks.run "${args[@]}" "$@" || status=$?
if [ "$mode" = full ] && [ -f benchmarks/results/latest.json ]; then
  "$PY" -m benchmarks.report --docs docs/benchmarks.md \
    || echo "bench.sh: could not refresh docs/benchmarks.md (run: $PY -m benchmarks.report --docs docs/benchmarks.md)" >&2
fi
exit "$status"
