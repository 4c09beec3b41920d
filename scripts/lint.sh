#!/usr/bin/env bash
# Format, lint and type checks (configured in pyproject.toml); run by `make test` before the tests.
# `bash scripts/lint.sh --fix` rewrites what the formatter and the linter can fix themselves.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ "${1:-}" = "--fix" ]; then
  $PY -m ruff format . && $PY -m ruff check --fix .
  exit $?
fi
s=0
$PY -m ruff format --check --quiet . || { echo "lint: files need formatting (bash scripts/lint.sh --fix)" >&2; s=1; }
$PY -m ruff check --quiet . || s=1
if [ "${LINT_TYPES:-1}" = "1" ]; then
  $PY -m mypy || s=1
fi
exit $s
