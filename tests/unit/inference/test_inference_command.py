"""``service.inference_service.command``: checked before any cluster starts, filled in
as a shell-split argv, and started/stopped by the same handle as the embedded server
(the server it starts here is a tiny HTTP server named as such: a stand-in for vLLM)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from backends.inference.embedded import EmbeddedServer
from backends.inference.embedded.handle import ServerStartError, fill_command
from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"
FIELD = "service.inference_service.command"


def problems(*overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as err:
        load_recipe_checked(RECIPE, list(overrides))
    return [p for p in err.value.problems if p.startswith(FIELD)]


def test_a_command_and_base_urls_are_one_or_the_other() -> None:
    (p,) = problems(
        f"{FIELD}='vllm serve {{model}} --port {{port}}'",
        "service.inference_service.base_urls=[http://h:8000]",
    )
    assert "base_urls must be empty" in p


def test_unknown_fields_and_a_missing_port_are_named() -> None:
    (p,) = problems(f"{FIELD}='vllm serve {{model}} --port {{port}} --tp {{gpus}}'")
    assert "unknown field(s) {gpus}" in p and "{served_model_name}" in p
    (p,) = problems(f"{FIELD}='vllm serve {{model}}'")
    assert "must take {port}" in p


def test_the_default_form_passes_the_check() -> None:
    cmd = "vllm serve {model} --host {host} --port {port} --served-model-name {served_model_name}"
    load_recipe_checked(RECIPE, [f"{FIELD}='{cmd}'"])


def test_fill_command_splits_like_a_shell_and_fills_the_fields() -> None:
    argv = fill_command(
        "vllm serve '{model}' --port {port} --served-model-name {served_model_name}",
        model="/runs/a b/model",
        host="127.0.0.1",
        port="8011",
        served_model_name="policy",
    )
    assert argv == [
        "vllm",
        "serve",
        "/runs/a b/model",
        "--port",
        "8011",
        "--served-model-name",
        "policy",
    ]


STANDIN = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("model=" + sys.argv[1]).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)

HTTPServer((sys.argv[2], int(sys.argv[3])), H).serve_forever()
"""


def _standin_server(tmp_path: Path) -> EmbeddedServer:
    """A handle whose command is the STANDIN script, not started yet."""
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    return EmbeddedServer(
        "/models/m",
        command=f"{sys.executable} {script} {{model}} {{host}} {{port}}",
        log_path=tmp_path / "inference.log",
        startup_timeout_s=60,
    )


def test_the_handle_starts_waits_for_health_and_stops_the_command(tmp_path: Path) -> None:
    server = _standin_server(tmp_path)
    with server:
        assert server.alive()
        reply = httpx.get(f"{server.base_url}/health", timeout=10)
        assert reply.text == "model=/models/m"
        proc = server.process
    assert proc is not None and proc.poll() is not None  # stopped with the handle


def test_a_command_started_from_a_thread_outlives_that_thread(tmp_path: Path) -> None:
    """The controller starts the server on a short-lived thread while the trainer sets
    up. The child's parent-death signal follows the thread that forked it, so a command
    forked there was SIGTERMed (exit -15) as soon as that thread finished."""
    import threading
    import time

    server = _standin_server(tmp_path)
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    try:
        time.sleep(2.0)  # the signal, when sent, arrives at once
        assert server.alive(), f"the server exited with {server.returncode}"
        assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200
    finally:
        server.stop()


def test_a_command_runs_in_the_drivers_environment_without_nexrls_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's own Python (vLLM in a venv of its own) must not import nexrl's
    packages: the handle adds nothing to its PYTHONPATH (the embedded server gets
    nexrl's import path; a command gets the driver's environment as it is)."""
    script = tmp_path / "env.py"
    script.write_text(
        "import os, sys\n"
        "from http.server import BaseHTTPRequestHandler, HTTPServer\n"
        "class H(BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = os.environ.get('PYTHONPATH', '<unset>').encode()\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
        "HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()\n"
    )
    monkeypatch.setenv("PYTHONPATH", "/the/drivers/own")
    server = EmbeddedServer(
        "/m",
        command=f"{sys.executable} {script} {{host}} {{port}}",
        log_path=tmp_path / "inference.log",
        startup_timeout_s=60,
    )
    with server:
        assert httpx.get(f"{server.base_url}/health", timeout=10).text == "/the/drivers/own"


def test_a_command_that_cannot_run_is_one_clear_error(tmp_path: Path) -> None:
    server = EmbeddedServer("/m", command="no-such-engine serve {model} --port {port}")
    with pytest.raises(ServerStartError, match="could not run 'no-such-engine'"):
        server.start()


def test_the_user_guides_command_line_passes_check(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM cannot run here: the guide's line is run with ``--check`` (everything but
    starting the engine)."""
    import shlex

    from nexrl.driver.cli.train import main

    text = Path("docs/user-guide.md").read_text().replace("\\\n", " ")
    (line,) = [ln.strip() for ln in text.splitlines() if f"{FIELD}=\"'vllm serve" in ln]
    args = shlex.split(line)
    assert args[:4] == ["./pants", "run", "src/python/nexrl:train", "--"], line
    assert main([*args[4:], "--check"]) == 0
    assert "recipe is valid" in capsys.readouterr().out


def test_the_trainer_guides_lora_on_vllm_line_passes_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/trainer.md, "LoRA on vLLM": the command as written, with ``--check``
    (everything but starting the engine: vLLM cannot run here)."""
    import shlex

    from nexrl.driver.cli.train import main

    text = Path("docs/trainer.md").read_text()
    section = text[text.index("### LoRA on vLLM") : text.index("## Checkpoints and resume")]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    args = shlex.split(block.replace("\\\n", " "))
    assert args[:4] == ["./pants", "run", "src/python/nexrl:train", "--"], args
    assert main([*args[4:], "--check"]) == 0
    assert "recipe is valid" in capsys.readouterr().out
