#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: OpenSSH server
# and client, rclone, lftp, and an unprivileged login user for the test sshd. Idempotent.
set -euo pipefail
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v rclone >/dev/null 2>&1 || need+=(rclone)  # tests/test_interop.py serves SFTP with it
command -v lftp >/dev/null 2>&1 || need+=(lftp)  # tests/test_bench_smoke.py runs it as a contender
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-test-deps: need ${need[*]} but not root; install them with: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup-test-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # One refresh of the package lists serves both install scripts of a run.
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -30 2>/dev/null | head -1)" ]; then
    apt-get update -qq
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" -eq 0 ]; then
  id attest >/dev/null 2>&1 || useradd --create-home --shell /bin/bash attest
  # "!" marks the account locked and sshd refuses even key logins; "*" means no
  # password can match while keys still work.
  usermod -p "*" attest
  mkdir -p /run/sshd
fi
