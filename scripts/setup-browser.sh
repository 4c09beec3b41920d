#!/usr/bin/env bash
# Installs Debian's headless Chromium and its chromedriver for the UI browser
# test (tests/test_ui_browser.py). Idempotent; parallel runs wait on one lock.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-browser: need chromium and chromium-driver but not root; install them with:" \
       "sudo apt-get install -y chromium chromium-driver" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "setup-browser: installing chromium and chromium-driver" >&2
flock /tmp/apt.lock apt-get update -qq
flock /tmp/apt.lock apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
