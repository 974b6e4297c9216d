#!/usr/bin/env bash
# Figures with Chinese characters (the Tang poems of notebook 08, the zh notebooks) draw them from
# the "Noto Sans CJK SC" font of Debian's `fonts-noto-cjk` package, and tests/test_cjk_font.py
# checks that no glyph is missing. Install it when it is missing: as root directly, otherwise
# through sudo without a password prompt; if neither works, say what to do (the tests that need it
# are then skipped; CI checks that it is there). gptlib.classroom.viz finds a font installed after
# matplotlib cached its font list, so no cache needs deleting.
set -euo pipefail
FONT="Noto Sans CJK SC"
have_font() {
    if command -v fc-list >/dev/null; then
        [ -n "$(fc-list ":family=$FONT" file)" ]
    else
        compgen -G "/usr/share/fonts/opentype/noto/NotoSansCJK-*.ttc" >/dev/null
    fi
}
if have_font; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "no font '$FONT' and no apt-get to install it: Chinese characters in figures are" \
        "drawn as empty boxes and the CJK font tests are skipped" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "no font '$FONT': run 'sudo apt-get install -y fonts-noto-cjk' once; until then" \
        "Chinese characters in figures are empty boxes and the CJK font tests are skipped" >&2
    exit 0
fi
echo "installing the Chinese font for the figures (apt-get install fonts-noto-cjk)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q fonts-noto-cjk >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q fonts-noto-cjk >/dev/null; }
have_font
