#!/usr/bin/env bash
# Make sure a headless Chromium is on PATH for the report's browser test (tests/unit/report/test_report_browser.py).
# Idempotent: does nothing when one is there. Otherwise installs Debian/Ubuntu's `chromium` with apt-get
# (as root, or through passwordless sudo). Never fails the caller: without apt, root or network it says
# so and the browser test skips with that reason (COMPACTSIM_REQUIRE_BROWSER=1 turns the skip into a failure).
set -u

for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null 2>&1; then
    exit 0
  fi
done

say() { echo "ensure-chromium: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
  say "no Chromium on PATH and no apt-get here: the browser test will skip (install chromium yourself to run it)"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  SUDO="sudo -n"
else
  say "no Chromium on PATH and no root or passwordless sudo for apt-get: the browser test will skip"
  exit 0
fi

say "installing chromium with apt-get (once; about 100 MB)"
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
  say "installed: $(command -v chromium)"
else
  say "apt-get could not install chromium (offline, or no such package here): the browser test will skip"
fi
exit 0
