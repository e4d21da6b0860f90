"""``--check`` refuses a recipe whose inference server would bind beyond loopback
without a token, naming ``service.inference_service.api_key``; loopback, a token, or
servers nexrl does not start pass. ``nexrl.core.util.auth``'s loopback test."""

from __future__ import annotations

import pytest

from nexrl.core.util.auth import bind_refusal, is_loopback, token_of
from nexrl.driver.cli.train import main

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


@pytest.mark.parametrize(
    "overrides",
    [
        ["service.inference_service.host=0.0.0.0"],
        ["service.inference_service.host=0.0.0.0", "service.inference_service.api_key=EMPTY"],
    ],
)
def test_beyond_loopback_without_a_token_fails_the_check(
    overrides: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([DEFAULT, *overrides, "--check"]) == 2
    err = capsys.readouterr().err
    assert "service.inference_service.api_key" in err and "'0.0.0.0'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # 127.0.0.1, no token
        ["service.inference_service.host=0.0.0.0", "service.inference_service.api_key=t0k"],
        ["service.inference_service.host=localhost"],
        ["service.inference_service.base_urls=[http://10.0.0.5:8000]"],  # not nexrl's server
    ],
)
def test_loopback_or_a_token_passes(
    overrides: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([DEFAULT, *overrides, "--check"]) == 0, capsys.readouterr().err


def test_loopback_addresses() -> None:
    assert [is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost")] == [
        True
    ] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "", "10.1.2.3", "192.168.0.7")] == [False] * 5
    assert [token_of(k) for k in (None, "", "EMPTY", " t ")] == [None, None, None, "t"]
    assert bind_refusal("127.0.0.1", None, what="x", field="f") is None
    assert bind_refusal("0.0.0.0", "t", what="x", field="f") is None
    line = bind_refusal("0.0.0.0", None, what="the server", field="my.field")
    assert line is not None and "\n" not in line and "my.field" in line
