#!/usr/bin/env bash
# Install the browser the web collector drives: Debian's chromium and chromium-driver.
#
#   scripts/setup_chromium.sh          (`make chromium-setup`; `make test` runs it)
#
# `rlvr-world collect web` starts /usr/bin/chromium through Playwright (Playwright's own browser
# downloads are not used: `playwright install` needs a download host). chromium-driver comes
# along for Selenium users of the same binary. Idempotent: when both binaries are present it
# does nothing. Needs root (or sudo) and Debian's package archive; nothing is fetched when the
# collector runs.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "setup_chromium.sh: need root or sudo to apt-get install chromium chromium-driver" >&2
        exit 1
    fi
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
chromium --version
