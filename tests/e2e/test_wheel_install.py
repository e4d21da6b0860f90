"""``pip install`` of the wheel ``./pants package src/python:wheel`` builds, into a fresh
virtualenv, and the ``nexrl`` command it installs, run as a user would:

* pip installs the wheel with its own requirements (torch from the machine's
  find-links, ``NEXRL_WHEEL_FIND_LINKS``, default /opt/wheels: the CPU build;
  everything else from the package index), with the machine's own pip configuration
  left out (``PIP_CONFIG_FILE=/dev/null``) and the CA bundle ``./pants`` trusts;
* ``nexrl --version`` is the wheel's version and ``nexrl.__version__``;
* ``nexrl new-task`` scaffolds a task from the installed template (in a folder outside
  the repository) and names ``nexrl train`` as the next step; its recipe passes
  ``nexrl train ... --check`` (its evaluator scores the example answer);
* ``nexrl -c RECIPE -t TAG`` (NexRL's own flags) trains two steps of the default
  recipe, with no repository source on the path; the run's experiment name gets the tag.

The wheel comes from Pants (``runtime_package_dependencies`` in this folder's BUILD).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nexrl
from tests.e2e._recipe import RECIPE

WHEEL = Path(f"nexrl-{nexrl.__version__}-py3-none-any.whl")
FIND_LINKS = os.environ.get("NEXRL_WHEEL_FIND_LINKS", "/opt/wheels")


def ca_bundle() -> str | None:
    """The CA bundle HTTPS downloads trust, chosen as ``./pants`` chooses it (the
    machine's pip configuration, where ``cert =`` may live, is left out here too)."""
    for name in ("NEXRL_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return os.environ[name]
    for path in (
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ):
        if Path(path).is_file():
            return path
    return None  # pip's own certifi bundle


def _env(venv: Path) -> dict[str, str]:
    """A user's shell with the venv activated: no PYTHONPATH (no repository source),
    the machine's pip configuration left out."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: int) -> str:
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_pip_install_the_wheel_and_train_with_the_nexrl_command(tmp_path: Path) -> None:
    wheel = WHEEL.resolve()
    assert wheel.is_file(), f"{WHEEL} not built (./pants package src/python:wheel)"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"nexrl-{nexrl.__version__}.dist-info/METADATA").decode()
    assert "Provides-Extra: mlflow" in meta and "Provides-Extra: wandb" in meta  # trackers
    assert "nexrl/driver/recipe/configs/nexrl_base.yaml" in names  # what every recipe inherits
    assert "backends/inference/embedded/__main__.py" in names  # the server it starts

    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    env = _env(venv)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-compile"]
    pip += ["--find-links", FIND_LINKS]
    cert = ca_bundle()
    if cert:  # the variable, not --cert: DeepSpeed is an sdist, built by a pip subprocess
        env["PIP_CERT"] = cert  # that gets no --cert (on a fresh machine: SSL errors)
    _run([*pip, str(wheel)], env, tmp_path, timeout=1800)
    nexrl_cmd = str(venv / "bin" / "nexrl")

    assert _run([nexrl_cmd, "--version"], env, tmp_path, 120).strip() == (
        f"nexrl {nexrl.__version__}"
    )
    torch_build = _run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        env,
        tmp_path,
        300,
    )
    assert torch_build.strip().endswith("+cpu"), torch_build  # from the find-links

    scaffold = _run([nexrl_cmd, "new-task", "my_task"], env, tmp_path, 300)
    assert "then nexrl train my_task/my_task.yaml --check" in scaffold
    _run([str(venv / "bin" / "python"), "my_task/make_data.py"], env, tmp_path, 300)
    checked = _run([nexrl_cmd, "train", "my_task/my_task.yaml", "--check"], env, tmp_path, 300)
    assert "my_task/my_task.yaml: recipe is valid" in checked  # its evaluator loaded and ran

    # The default recipe, from a clone of the repository (its data paths are relative to
    # the repository's root), with NexRL's flags: -c the recipe, -t a suffix for the name.
    out = tmp_path / "run"
    _run(
        [
            nexrl_cmd, "-c", RECIPE, "-t", "wheel", f"output_dir={out}",
            "trainer.total_train_steps=2", "trainer.save_every=0",
            "validate.validate_before_train=false", "validate.every=0",
            "cluster.n_workers=2", "cluster.dashboard_address=127.0.0.1:0",
        ],
        env, Path.cwd(), timeout=900,
    )  # fmt: skip
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    assert (out / "summary.json").is_file()
    assert "experiment_name: max_digit_tiny-wheel" in (out / "config.yaml").read_text()
