"""code_execution runs the model's program in the sandbox: correct programs score their
share of the tests; programs that try to escape (a socket, a fork bomb, a write outside
the scratch dir, a host file only root may read, sleeping forever, 10 GB of memory,
burning CPU) are stopped, score 0, and leave this process and machine as they were."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from pathlib import Path

import pytest

from nexrl.core.types.episode import BaseEvaluationTarget
from nexrl.rollout.evaluators import build
from nexrl.rollout.evaluators.sandbox import SandboxUnavailable, sandbox_python

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [{"input": "1 2", "output": "3"}, {"input": "10 -4", "output": "6"}]

try:
    sandbox_python("python3")
    UNAVAILABLE = None
except SandboxUnavailable as exc:
    UNAVAILABLE = str(exc)
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"{UNAVAILABLE}")


def run(program: str, tests=TESTS, **options):
    ev = build("code_execution", {"wall_s": 3.0, "cpu_s": 1.0, **options})
    answer = f"Here it is:\n```python\n{program}```\n"
    return ev.evaluate({"tests": tests}, BaseEvaluationTarget(final_answer=answer))


def nobody_processes() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid == 65534:
                    out.append(int(d.name))
            except FileNotFoundError:
                pass
    return out


def test_a_correct_program_passes_every_test_and_a_wrong_one_its_share() -> None:
    good = run(ADD)
    assert (good.reward, good.metrics) == (
        1.0,
        {"tests_passed": 1.0, "timeouts": 0.0, "crashes": 0.0},
    )
    # a + b + 1 if a > 5 passes the first test only
    half = run("a, b = map(int, input().split())\nprint(a + b + (a > 5))\n")
    assert half.reward == 0.5
    assert run(ADD.replace("+", "-"), all_or_nothing=True).reward == 0.0
    assert run(ADD, tests='[{"input": "2 2", "output": "4"}]').reward == 1.0  # JSON text


def test_a_socket_reaches_nothing_not_even_the_hosts_loopback() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(0.2)

    def serve() -> None:
        for _ in range(30):  # ~6 s
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept())

    thread = threading.Thread(target=serve)
    thread.start()
    program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n{ADD}"
    result = run(program)
    thread.join()
    server.close()
    assert result.reward == 0.0 and result.metrics["crashes"] == 2.0
    assert accepted == []


def test_a_fork_bomb_is_stopped_and_leaves_no_process() -> None:
    bomb = f"{ADD}import os, sys\nsys.stdout.flush()\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run(bomb, tests=TESTS[:1])
    assert result.reward == 0.0  # right output, but it never finished
    assert result.metrics["tests_passed"] == 0.0
    assert result.metrics["timeouts"] + result.metrics["crashes"] == 1.0
    assert nobody_processes() == []
    assert run(ADD).reward == 1.0  # the next program runs as before


def test_a_write_outside_the_scratch_dir_fails(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()  # root's, 0755
    program = f"open({str(outside / 'pwned')!r}, 'w').write('x')\n{ADD}"
    assert run(program).reward == 0.0
    assert not (outside / "pwned").exists()
    # its own scratch dir (the cwd) is writable; /tmp and /dev/shm are that scratch dir
    assert run(f"open('notes.txt', 'w').write('x')\n{ADD}").reward == 1.0
    host = Path("/tmp") / f"nexrl-escape-{uuid.uuid4().hex}"
    shm = Path("/dev/shm") / host.name
    program = f"open({str(host)!r}, 'w').write('x')\nopen({str(shm)!r}, 'w').write('x')\n{ADD}"
    assert run(program).reward == 1.0  # written, to its own scratch dir
    assert not host.exists() and not shm.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a file only root may read")
def test_a_host_file_only_root_may_read_stays_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("42\n")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    program = f"print(open({str(secret)!r}).read().strip())\n"
    result = run(program, tests=[{"input": "", "output": "42"}])
    assert result.reward == 0.0 and result.metrics["crashes"] == 1.0


def test_sleeping_forever_is_killed_at_the_wall_clock() -> None:
    result = run(f"import time\ntime.sleep(10**9)\n{ADD}", tests=TESTS[:1], wall_s=1.0)
    assert (result.reward, result.metrics["timeouts"]) == (0.0, 1.0)


def test_ten_gigabytes_of_memory_are_refused() -> None:
    result = run(f"x = bytearray(10 * 1024**3)\n{ADD}", tests=TESTS[:1])
    assert (result.reward, result.metrics["crashes"]) == (0.0, 1.0)


def test_burning_cpu_is_stopped_by_the_cpu_limit() -> None:
    result = run(f"{ADD}while True:\n    pass\n", tests=TESTS[:1], wall_s=30.0)
    assert (result.reward, result.metrics["crashes"], result.metrics["timeouts"]) == (0.0, 1.0, 0.0)


def test_an_output_flood_is_cut_at_the_file_size_limit() -> None:
    result = run("while True:\n    print('x' * 1000)\n", tests=TESTS[:1], file_size_kb=64)
    assert (result.reward, result.metrics["crashes"]) == (0.0, 1.0)


def test_without_util_linux_the_evaluator_refuses_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nexrl.rollout.evaluators import sandbox

    monkeypatch.setattr(sandbox, "SAFE_PATH", str(tmp_path))  # a PATH with no tools
    sandbox_python.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable) as info:
            build("code_execution")
    finally:
        sandbox_python.cache_clear()
    assert str(info.value) == (
        f"code_execution sandbox: 'prlimit' (util-linux) not found in {tmp_path}; it is "
        "needed for the namespaces, the limits and the drop to nobody"
    )
