#!/usr/bin/env bash
# Installs what `make bench` (benchmarks/bench.sh, docs/benchmarks.md) needs on a fresh
# Debian machine: the contenders' tools (rclone, rsync, lftp, the OpenSSH client), the
# test sshd and its user, the link emulator's needs, the project's venv, and the Python
# packages only the benchmark uses (matplotlib for the charts, sshfs and Airflow's SFTP
# provider as contenders). Run as root from a clone; idempotent (installs only what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v rclone >/dev/null 2>&1 || need+=(rclone)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
command -v lftp >/dev/null 2>&1 || need+=(lftp)
command -v sftp >/dev/null 2>&1 && command -v scp >/dev/null 2>&1 || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-bench-deps: need ${need[*]} but not root; run: sudo bash scripts/install-bench-deps.sh" >&2
    exit 1
  fi
  echo "install-bench-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi
bash scripts/setup-test-deps.sh
bash scripts/install-wan-deps.sh

bash scripts/bootstrap.sh
PY=.venv/bin/python
py_need=()
"$PY" -c "import matplotlib" 2>/dev/null || py_need+=(matplotlib)
"$PY" -c "import sshfs" 2>/dev/null || py_need+=(sshfs)
"$PY" -c "import airflow.providers.sftp" 2>/dev/null || py_need+=(apache-airflow-providers-sftp)
if [ ${#py_need[@]} -gt 0 ]; then
  echo "install-bench-deps: installing ${py_need[*]} into .venv" >&2
  if command -v uv >/dev/null 2>&1; then
    uv pip install -q -p "$PY" "${py_need[@]}"
  else
    "$PY" -m pip install -q "${py_need[@]}"
  fi
fi
