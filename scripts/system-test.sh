#!/usr/bin/env bash
# `make system-test`: the replication DAG on a real CeleryExecutor deployment
# (tests/system/run_system_test.py). Needs Redis on 127.0.0.1:6379 and PostgreSQL
# on 127.0.0.1:5432 (trust auth for user postgres); writes tests/system/last-result.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/setup-test-deps.sh
exec .venv/bin/python tests/system/run_system_test.py "$@"
