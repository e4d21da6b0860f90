#!/usr/bin/env bash
# System (Debian) packages the tests need beyond Python: installs what is missing,
# does nothing when all are there (safe to run again).
#   chromium, chromium-driver: the browser tests of the /nexrl dashboard page
#   (tests/e2e/test_dashboard_page.py drives /usr/bin/chromium with selenium).
set -euo pipefail

packages=(chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "system-packages: all present (${packages[*]})"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "system-packages: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
