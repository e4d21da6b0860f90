#!/usr/bin/env bash
# System (Debian) packages the tests need beyond Python: installs what is missing
# in one apt-get transaction, does nothing when all are there (safe to run again).
#   chromium, chromium-driver: the browser tests of the /nexrl dashboard page
#     (tests/e2e/test_dashboard_page.py drives /usr/bin/chromium with selenium);
#   slurmctld, slurmd, slurm-client, munge: the test Slurm (build-support/slurm.sh).
#   build-support/system-packages.sh --check-only   exit 1 when any is missing, install nothing
set -euo pipefail

packages=(chromium chromium-driver slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "system-packages: all present (${packages[*]})"
  exit 0
fi
if [ "${1:-}" = "--check-only" ]; then
  echo "system-packages: missing ${missing[*]}"
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "system-packages: installing ${missing[*]}"
t0=$(date +%s)
$sudo apt-get update -qq
# chromium without its recommends (as before); Slurm's packages as slurm.sh installs them.
browser=() rest=()
for p in "${missing[@]}"; do
  case "$p" in chromium*) browser+=("$p") ;; *) rest+=("$p") ;; esac
done
if [ "${#browser[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${browser[@]}" >/dev/null
fi
if [ "${#rest[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${rest[@]}" >/dev/null
fi
echo "system-packages: installed in $(( $(date +%s) - t0 )) s"
