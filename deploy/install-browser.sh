#!/usr/bin/env bash
# Installs the headless browser the browser tests drive (tests/browser/): Debian's chromium and
# chromium-driver. A test tool's own browser download does not work on these machines, so the
# tests point selenium at /usr/bin/chromium and /usr/bin/chromedriver.
#
# Idempotent: does nothing when both binaries exist. Called by `make setup`.
# Runs apt-get as root, through sudo when not root and sudo exists; otherwise says what to run.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

if [[ -x "$CHROMIUM" && -x "$CHROMEDRIVER" ]]; then
    exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-browser: $CHROMIUM or $CHROMEDRIVER is missing and this user cannot install packages;" >&2
    echo "  as root run: apt-get install -y --no-install-recommends chromium chromium-driver" >&2
    echo "  (the browser tests can be deselected with: pytest -m 'not browser')" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: no apt-get on this machine; install Chromium and its chromedriver so that" >&2
    echo "  $CHROMIUM and $CHROMEDRIVER exist (or deselect the browser tests: pytest -m 'not browser')" >&2
    exit 1
fi

echo "install-browser: installing chromium and chromium-driver (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
"$CHROMIUM" --version
"$CHROMEDRIVER" --version
