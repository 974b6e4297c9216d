#!/usr/bin/env bash
# The browser tests drive the system Chromium (Debian's `chromium` package) and read Chinese pages,
# which need a CJK font (Debian's `fonts-noto-cjk`). Install what is missing: as root directly,
# otherwise through sudo without a password prompt; if neither works, say what to do.
set -euo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
if command -v fc-list >/dev/null && [ -z "$(fc-list :lang=zh 2>/dev/null)" ]; then
    missing+=(fonts-noto-cjk)
fi
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "missing for the browser tests: ${missing[*]}, and no apt-get to install them: install" \
        "them (Chromium: run again with CHROMIUM=/path/to/chromium)" >&2
    [ -x "$CHROMIUM" ] && exit 0 || exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "missing for the browser tests: ${missing[*]}: run 'sudo apt-get install -y" \
        "${missing[*]}' once, then again" >&2
    [ -x "$CHROMIUM" ] && exit 0 || exit 1
fi
echo "installing for the browser tests: apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q "${missing[@]}" >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "${missing[@]}" >/dev/null; }
"$CHROMIUM" --version
