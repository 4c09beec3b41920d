#!/usr/bin/env bash
# What `make test` needs before any test runs: the venv (bootstrap.sh) and the system packages
# (setup-test-deps.sh, then install-wan-deps.sh). The two share nothing, so on a fresh machine
# apt downloads and installs while uv and compileall build the venv. Fails if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv's interpreter is picked by a CPU-time probe (pick-python.sh): run it before apt
# starts, not under it (in one CI run, under apt, it picked the slower build).
if [ -z "${PYTHON:-}" ] && [ ! -f .venv/.installed ]; then
  PICKED_PYTHON="$(bash scripts/pick-python.sh)"
  export PICKED_PYTHON
fi
(
  bash scripts/setup-test-deps.sh
  if [ -f scripts/install-wan-deps.sh ]; then bash scripts/install-wan-deps.sh; fi
) &
deps=$!
status=0
bash scripts/bootstrap.sh || status=$?
wait "$deps" || status=$?
exit "$status"
