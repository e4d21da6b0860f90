"""Fixtures shared by every test tier: tiny models, embedded inference servers, a Dask cluster.

All are module-scoped (or narrower): unit and e2e test files share pytest processes
(``batch_compatibility_tag`` in tests/unit/BUILD, tests/e2e/BUILD), so nothing started or written
here outlives the file that asked for it.

A module (or a folder's conftest) changes a fixture's settings by overriding
the fixture it builds on, e.g. another model for ``embedded_server``::

    @pytest.fixture(scope="module")
    def tiny_model_dir(tiny_model: TinyModelFactory) -> Path:
        return tiny_model(vocab=WORDS, seed=3)

Heavy imports (torch, transformers, distributed) happen inside the fixtures, so
test files that use none of them (tests/build) do not pay for them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.inference._helpers import BIGRAM_REPLY, SERVED_NAME

if TYPE_CHECKING:
    from backends.inference.embedded import EmbeddedServer

TinyModelFactory = Callable[..., Path]
ServerFactory = Callable[..., "EmbeddedServer"]


# -- isolation -----------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def environment_kept_per_file() -> Iterator[None]:
    """What a test file leaves in ``os.environ`` is undone after it: files share pytest
    processes (``batch_compatibility_tag``), and a Dask nanny started directly (not by
    nexrl) exports its ``pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``) into the
    process that starts it, where the next file's subprocesses would inherit it."""
    before = dict(os.environ)
    yield
    for name in [n for n in os.environ if n not in before]:
        del os.environ[name]
    os.environ.update(before)


# -- models --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModelFactory:
    """Save a tiny random Qwen2 (tokenizer + safetensors) in a fresh folder; returns the folder.

    Takes ``nexrl.driver.modeling.save_tiny_model``'s settings: ``tiny_model(vocab=WORDS, seed=3)``.
    """

    def make(**settings: Any) -> Path:
        from nexrl.driver.modeling import save_tiny_model

        return save_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", **settings)

    return make


@pytest.fixture(scope="module")
def tiny_model_dir(tiny_model: TinyModelFactory) -> Path:
    """The default tiny model (default vocabulary, seed 1). Override to change it."""
    return tiny_model(seed=1)


@pytest.fixture(scope="module")
def vocab_size(tiny_model_dir: Path) -> int:
    """``tiny_model_dir``'s vocabulary size (its ``config.json``)."""
    return int(json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"])


@pytest.fixture(scope="module")
def bigram_reply() -> str:
    """What ``bigram_model_dir`` answers to every chat turn. Override to change it."""
    return BIGRAM_REPLY


@pytest.fixture(scope="module")
def bigram_model_dir(tmp_path_factory: pytest.TempPathFactory, bigram_reply: str) -> Path:
    """A model with known weights: greedy decoding answers every chat turn with ``bigram_reply``."""
    from tests.integration.inference._known_model import save_bigram_model

    return save_bigram_model(tmp_path_factory.mktemp("bigram_model") / "model", bigram_reply)


# -- embedded inference servers --------------------------------------------------


@pytest.fixture(scope="module")
def start_embedded_server() -> Iterator[ServerFactory]:
    """Start embedded servers (``python -m backends.inference.embedded``) on a model folder.

    ``start_embedded_server(model, *extra_args)``: healthy on return, served as
    ``SERVED_NAME``, batching within 20 ms (``extra_args`` are added after that,
    so they win); ``batch_window_ms=None`` leaves the server's default. All are
    stopped at the end of the module, and checked to have exited.
    """
    from backends.inference.embedded import EmbeddedServer

    started: list[EmbeddedServer] = []

    def start(
        model: Path,
        *extra_args: str,
        batch_window_ms: int | None = 20,
        startup_timeout_s: float = 180,
    ) -> EmbeddedServer:
        window = [] if batch_window_ms is None else ["--batch-window-ms", str(batch_window_ms)]
        server = EmbeddedServer(
            model,
            served_model_name=SERVED_NAME,
            extra_args=[*window, *extra_args],
            startup_timeout_s=startup_timeout_s,
        )
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
    for server in started:
        proc = server.process
        assert proc is None or proc.poll() is not None, "server process left running"


@pytest.fixture(scope="module")
def embedded_server(start_embedded_server: ServerFactory, tiny_model_dir: Path) -> EmbeddedServer:
    """A server on ``tiny_model_dir`` for one test module (random weights: random text)."""
    return start_embedded_server(tiny_model_dir)


@pytest.fixture(scope="module")
def bigram_server(start_embedded_server: ServerFactory, bigram_model_dir: Path) -> EmbeddedServer:
    """A server on ``bigram_model_dir``: answers every chat turn with ``bigram_reply``."""
    return start_embedded_server(bigram_model_dir)


# -- Dask ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_cluster_settings() -> dict[str, Any]:
    """``distributed.LocalCluster`` settings of ``local_cluster``. Override to change them."""
    return {
        "n_workers": 2,
        "threads_per_worker": 1,
        "processes": True,
        "resources": {"GPU": 1},  # what trainer actors ask for
        "dashboard_address": "127.0.0.1:0",
        "silence_logs": logging.WARNING,
    }


@pytest.fixture(scope="module")
def local_cluster(local_cluster_settings: dict[str, Any]) -> Iterator[Any]:
    """A ``distributed.Client`` on a LocalCluster of worker processes, for one test module."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(**local_cluster_settings) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
