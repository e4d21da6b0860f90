"""The ./pants bootstrap script: its failure mode and its agreement with pants.toml."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path.cwd()


def _run_without_python39(tmp_path: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``./pants --version`` on a machine with no CPython 3.9 anywhere: empty HOME (no
    cached venv), empty pyenv root, and a PATH with only a shell and coreutils. The
    script stops at the bootstrap's first step, after its checks of the machine."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", "mkdir", "sha256sum", "cut", "rm", "mv"):
        if (bindir / tool).exists():
            continue
        src = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True)
        (bindir / tool).symlink_to(src.stdout.strip())
    env = {
        "HOME": str(tmp_path / "home"),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
        "PATH": str(bindir),
        **extra_env,
    }
    return subprocess.run(
        [str(bindir / "bash"), str(ROOT / "pants"), "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_without_python39_prints_one_line_saying_what_to_install(tmp_path: Path) -> None:
    proc = _run_without_python39(tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "CPython 3.9" in lines[0]
    assert "install" in lines[0] and "NEXRL_PANTS_PYTHON" in lines[0]
    assert proc.stdout == ""


def test_pex_cli_pin_agrees_with_pants_toml() -> None:
    script = (ROOT / "pants").read_text()
    pex_version = re.search(r'^PEX_VERSION="([^"]+)"', script, re.M)
    pex_sha = re.search(r'^PEX_SHA256="([0-9a-f]{64})"', script, re.M)
    pants_version = re.search(r'^PANTS_VERSION="([^"]+)"', script, re.M)
    assert pex_version and pex_sha and pants_version

    toml = tomllib.loads((ROOT / "pants.toml").read_text())
    assert toml["GLOBAL"]["pants_version"] == pants_version.group(1)
    assert toml["pex-cli"]["version"] == f"v{pex_version.group(1)}"
    known = toml["pex-cli"]["known_versions"]
    assert any(
        k.startswith(f"v{pex_version.group(1)}|linux_x86_64|{pex_sha.group(1)}|") for k in known
    ), known
    # The file Pants fetches is the one ./pants builds.
    assert toml["pex-cli"]["url_template"].endswith("/.cache/nexrl-pants/pex-{version}")
    assert 'PEX_FILE="${CACHE_DIR}/pex-v${PEX_VERSION}"' in script
    assert 'CACHE_DIR="${HOME}/.cache/nexrl-pants"' in script


def test_script_is_executable() -> None:
    assert os.access(ROOT / "pants", os.X_OK)


def test_pants_processes_read_no_pip_config() -> None:
    # pex runs pip with --isolated, which still reads the global pip config
    # files; PIP_CONFIG_FILE=/dev/null is what makes pip skip every file.
    toml = tomllib.loads((ROOT / "pants.toml").read_text())
    assert "PIP_CONFIG_FILE=/dev/null" in toml["subprocess-environment"]["env_vars"]


def test_every_bootstrap_pip_call_ignores_the_host_pip_config() -> None:
    script = (ROOT / "pants").read_text()
    pip_calls = [
        line for line in script.splitlines() if 'bin/pip" install' in line or "-m pex " in line
    ]
    assert len(pip_calls) == 2, pip_calls
    for line in pip_calls:
        assert line.lstrip().startswith(
            ("PIP_CONFIG_FILE=/dev/null", "if ! PIP_CONFIG_FILE=/dev/null")
        ), line
    assert "hermetic_pip_args=(--isolated" in script


def test_ci_runs_the_cold_path_check_then_the_readme_test_command() -> None:
    """CI runs the cold path, then exactly the README's one test command, which
    prepares the machine and runs ``./pants test ::``."""
    ci = (ROOT / ".ci" / "run").read_text()
    cold = (ROOT / ".ci" / "cold").read_text()
    readme = (ROOT / "README.md").read_text()
    test_sh = (ROOT / "build-support" / "test.sh").read_text()
    assert "Run all tests:\n\n    build-support/test.sh\n" in readme
    assert ci.index(".ci/cold\n") < ci.index("\nbuild-support/test.sh\n")
    assert './pants test "$@"' in test_sh and "set -- ::" in test_sh
    for step in (
        "build-support/system-packages.sh",
        "build-support/slurm.sh start",
        "build-support/vllm.sh",
    ):
        assert step in test_sh, step
    assert "pants run src/python/nexrl:train -- recipes/max_digit/max_digit_tiny.yaml" in cold
    assert 'mount --bind "$tmp/cache" "$HOME/.cache"' in cold
    assert 'mount --bind "$tmp/pex" "$HOME/.pex"' in cold


def test_another_pants_running_in_the_repo_is_named_in_one_line(tmp_path: Path) -> None:
    """A Pants client running in this repo (as ``./pants run ...`` leaves it: ``python -m
    pants run ...`` with its working directory in the repo) makes a second ``./pants``
    say at once that it will wait for it, and how not to."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    client = venv_bin / "python"  # runs as `.../bin/python -m pants run ...`, 60 s
    client.write_text("#!/bin/bash\nsleep 60\n")
    client.chmod(0o755)
    running = subprocess.Popen(
        [str(client), "-m", "pants", "run", "src/python/nexrl:train", "--", "r.yaml"],
        cwd=ROOT / "tests",  # a folder of the repo
    )
    try:
        proc = _run_without_python39(tmp_path)
        concurrent = _run_without_python39(tmp_path, PANTS_CONCURRENT="true")
    finally:
        running.kill()
        running.wait()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0] == (
        f"note: another ./pants is running in this repo (pid {running.pid}: pants run "
        "src/python/nexrl:train -- r.yaml); this call waits up to 60 s for it to finish, "
        "then fails: wait for it, or run this one with PANTS_CONCURRENT=true (a separate "
        "Pants, slower to start)"
    )
    assert "CPython 3.9" in lines[1]  # then the script goes on as usual
    assert "note:" not in concurrent.stderr  # PANTS_CONCURRENT=true: nothing to wait for
    after = _run_without_python39(tmp_path)  # the other one has finished
    assert "note:" not in after.stderr


def test_a_pants_running_in_another_folder_is_not_reported(tmp_path: Path) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    client = venv_bin / "python"
    client.write_text("#!/bin/bash\nsleep 60\n")
    client.chmod(0o755)
    elsewhere = tmp_path / "other-repo"
    elsewhere.mkdir()
    running = subprocess.Popen([str(client), "-m", "pants", "test", "::"], cwd=elsewhere)
    try:
        proc = _run_without_python39(tmp_path)
    finally:
        running.kill()
        running.wait()
    assert "note:" not in proc.stderr


def test_pants_gives_an_interrupted_run_time_to_checkpoint() -> None:
    """Pants kills the program of a `run` this long after passing Ctrl-C on (its default,
    3 s, killed a training run after its checkpoint, before it had stopped)."""
    pants_toml = tomllib.loads((ROOT / "pants.toml").read_text())
    assert pants_toml["GLOBAL"]["process_execution_graceful_shutdown_timeout"] >= 60
