#!/usr/bin/env bash
# Installs the SFTP servers `make interop` tests against (benchmarks/interop.py):
# rclone, dropbear, ProFTPD with mod_sftp (Debian packages), OpenSSH's sftp-server
# where dropbear looks for it, and asyncssh in .venv (PyPI; not in requirements.lock).
# Idempotent; apt-get needs root, as in scripts/setup-test-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v rclone >/dev/null 2>&1 || need+=(rclone)
command -v dropbear >/dev/null 2>&1 || [ -x /usr/sbin/dropbear ] || need+=(dropbear-bin)
[ -x /usr/sbin/proftpd ] || need+=(proftpd-core)
# mod_sftp is in proftpd-mod-crypto in bookworm (with mod_tls); proftpd-core has no mod_sftp.
ls /usr/lib/proftpd/mod_sftp.so >/dev/null 2>&1 || need+=(proftpd-mod-crypto)
[ -x /usr/lib/openssh/sftp-server ] || need+=(openssh-sftp-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-interop-deps: need ${need[*]} but not root; install them with: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "install-interop-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # The packages' maintainer scripts would start system-wide daemons (proftpd on port 21);
  # the harness runs its own instances, so service starts are refused during the install.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# dropbear runs the SFTP subsystem from a path compiled into it (Debian's build: the
# upstream default /usr/libexec/sftp-server); OpenSSH's server lives elsewhere on Debian.
# Read the path out of the binary rather than assuming it.
if [ "$(id -u)" -eq 0 ]; then
  db="$(command -v dropbear || echo /usr/sbin/dropbear)"
  want="$(grep -a -o -m1 '/[A-Za-z0-9_/.-]*sftp-server' "$db" | head -n1 || true)"
  want="${want:-/usr/libexec/sftp-server}"
  if [ "$want" != /usr/lib/openssh/sftp-server ] && [ ! -e "$want" ]; then
    mkdir -p "$(dirname "$want")"
    ln -s /usr/lib/openssh/sftp-server "$want"
    echo "install-interop-deps: linked $want -> /usr/lib/openssh/sftp-server (dropbear's SFTP path)" >&2
  fi
fi

# asyncssh into the project's venv (a test server only; the product does not use it).
if ! .venv/bin/python -c "import asyncssh" >/dev/null 2>&1; then
  echo "install-interop-deps: installing asyncssh into .venv" >&2
  if command -v uv >/dev/null 2>&1; then
    uv pip install -q -p .venv/bin/python asyncssh
  else
    .venv/bin/python -m uv pip install -q -p .venv/bin/python asyncssh
  fi
fi
