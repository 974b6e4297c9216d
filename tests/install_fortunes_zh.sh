#!/usr/bin/env bash
# `python -m gptlib train --data tang300` reads the 300 Tang poems of Debian's `fortunes-zh`
# package, and the unit tests check that corpus. Install it when it is missing: as root directly,
# otherwise through sudo without a password prompt; if neither works, say what to do (the tests
# that need it are then skipped; CI checks that it is there).
set -euo pipefail
TANG300="/usr/share/games/fortunes/tang300"
if [ -f "$TANG300" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "no $TANG300 and no apt-get to install it: the tang300 corpus tests are skipped" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "no $TANG300: run 'sudo apt-get install -y fortunes-zh' once; until then the" \
        "tang300 tests are skipped" >&2
    exit 0
fi
echo "installing the Tang poem corpus for the tests (apt-get install fortunes-zh)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q fortunes-zh >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q fortunes-zh >/dev/null; }
test -f "$TANG300"
