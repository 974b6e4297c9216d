#!/usr/bin/env bash
# The browser tests drive the system Chromium (Debian's `chromium` package). Install it when it
# is missing: as root directly, otherwise through sudo without a password prompt; if neither
# works, say what to do.
set -euo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "no Chromium at $CHROMIUM and no apt-get to install it: install Chromium and run" \
        "again with CHROMIUM=/path/to/chromium" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "no Chromium at $CHROMIUM: run 'sudo apt-get install -y chromium' once, then again" >&2
    exit 1
fi
echo "installing Chromium for the browser tests (apt-get install chromium)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q chromium >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium >/dev/null; }
"$CHROMIUM" --version
