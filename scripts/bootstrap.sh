#!/usr/bin/env bash
# Creates .venv with the pinned dependencies (requirements.lock) and the project
# installed in editable mode. Uses uv when present (seconds); otherwise makes the venv
# with the interpreter's venv module and installs uv inside it first. Idempotent: re-runs
# only when the lock, pyproject, this script or $PYTHON changed.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.installed
want="$( (cat requirements.lock pyproject.toml "$0"; echo "${PYTHON:-}") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
# The interpreter: $PYTHON if given, else the fastest CPython 3.11 found (pick-python.sh says
# why: on these machines PATH finds a build without profile-guided optimisation first).
if [ -z "${PYTHON:-}" ]; then
  PYTHON="${PICKED_PYTHON:-$(bash scripts/pick-python.sh)}"
  [ -n "$PYTHON" ] || PYTHON=python3
fi
# A .venv made from another interpreter is made again.
real_python="$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null || echo "$PYTHON")"
if [ -x .venv/bin/python ] && [ "$(readlink -f .venv/bin/python)" != "$real_python" ]; then
  echo "bootstrap: .venv was made with $(readlink -f .venv/bin/python); making it again with $PYTHON" >&2
  rm -rf .venv
fi
echo "bootstrap: creating .venv (Python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))" >&2
if command -v uv >/dev/null 2>&1; then
  UV="$(command -v uv)"
  [ -x .venv/bin/python ] || "$UV" venv -q -p "$PYTHON" .venv
else
  # No uv: make the venv with the interpreter's own venv module and put uv inside it.
  # Installing uv next to the interpreter fails on a distribution Python (PEP 668).
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv || {
    echo "bootstrap: $PYTHON could not make a venv; install its venv module (Debian: apt-get install python3.11-venv) or uv" >&2; exit 1; }
  [ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv || {
    echo "bootstrap: could not install uv into .venv (is PyPI reachable?); install it with: pip install uv" >&2; exit 1; }
  UV=.venv/bin/uv
fi
"$UV" pip install -q -p .venv/bin/python -r requirements.lock
"$UV" pip install -q -p .venv/bin/python --no-deps -e .
# Bytecode now, once, for the libraries and the project itself (an editable install has
# none): where PYTHONDONTWRITEBYTECODE is set (as on these machines),
# Python would otherwise compile every imported module on every run - about 2 s of
# CPU per `airflow-transfer` call, more per Airflow task process. The DAGs, benchmarks,
# profilers and test helpers too: the test suite starts hundreds of processes that import them.
.venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  airflow_transfer benchmarks dags profilers tests >/dev/null || true
echo "$want" > "$stamp"
echo "bootstrap: .venv ready" >&2
