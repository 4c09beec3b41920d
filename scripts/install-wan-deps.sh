#!/usr/bin/env bash
# Installs what the emulated WAN testbed (benchmarks/wan/) needs on a fresh
# Debian machine: gcc for the link emulator, iproute2 for namespaces and TUN
# devices, iperf3 and ping for the fidelity tests, traceroute for the network
# profiler's hop count. Run as root; idempotent (installs only what is missing).
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have gcc || need+=(gcc libc6-dev)
have ip || need+=(iproute2)
have iperf3 || need+=(iperf3)
have ping || need+=(iputils-ping)
have traceroute || need+=(traceroute)
have modprobe || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-wan-deps: need ${need[*]} but not root; run: sudo bash scripts/install-wan-deps.sh" >&2
    exit 1
  fi
  echo "install-wan-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # One refresh of the package lists serves both install scripts of a run.
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -30 2>/dev/null | head -1)" ]; then
    apt-get update -qq
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The emulator attaches to TUN devices; containers sometimes lack the node.
if [ ! -e /dev/net/tun ] && [ "$(id -u)" -eq 0 ]; then
  modprobe tun 2>/dev/null || true
  if [ ! -e /dev/net/tun ]; then
    mkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun || true
  fi
fi
[ -e /dev/net/tun ] || { echo "install-wan-deps: /dev/net/tun is missing and could not be created" >&2; exit 1; }
