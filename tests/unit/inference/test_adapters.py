"""Reload adapters: the exact HTTP requests sent to each engine kind.

vLLM and SGLang do not install on CPU-only machines, so each replica here is a
``StandinEngine``: a real local HTTP server that records requests and answers
like the engine's endpoint does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.inference.adapters import (
    ADAPTERS,
    EmbeddedReloadAdapter,
    ReloadError,
    SGLangReloadAdapter,
    VLLMReloadAdapter,
    make_reload_adapter,
)
from nexrl.core.chat.balance import RoundRobin, normalize_base_url, normalize_base_urls
from tests.unit.inference._standin import Recorded, StandinEngine

SNAP = "/snapshots/step_000007"


def _sglang_ok() -> StandinEngine:
    return StandinEngine(
        {
            ("POST", "/update_weights_from_disk"): (
                200,
                {
                    "success": True,
                    "message": "Succeeded to update model weights.",
                    "num_paused_requests": 0,
                },
            ),
            ("GET", "/health"): (200, {}),
        }
    )


def _vllm_ok() -> StandinEngine:
    """vLLM 0.32's dev-mode routes, with its weight label (``/update_weight_version``
    sets what ``/weight_info`` reports)."""
    label = {"weight_version": "default"}

    def set_label(rec: Recorded) -> tuple[int, object]:
        label["weight_version"] = str(rec.body["new_version"])
        return 200, {"success": True, "new_version": label["weight_version"]}

    return StandinEngine(
        {
            ("POST", "/collective_rpc"): (200, {"results": [None]}),
            ("POST", "/reset_prefix_cache"): (200, {}),
            ("POST", "/pause"): (200, {"status": "paused"}),
            ("POST", "/resume"): (200, {"status": "resumed"}),
            ("POST", "/update_weight_version"): set_label,
            ("GET", "/weight_info"): lambda rec: (200, dict(label)),
        }
    )


LABEL = [("POST", "/update_weight_version"), ("GET", "/weight_info")]


def test_factory_selects_by_backend_name() -> None:
    assert sorted(ADAPTERS) == ["embedded", "sglang", "vllm"]
    with make_reload_adapter("sglang", "http://127.0.0.1:1") as a:
        assert isinstance(a, SGLangReloadAdapter)
    with pytest.raises(ValueError, match="unknown inference backend 'trt'"):
        make_reload_adapter("trt", "http://127.0.0.1:1")


def test_sglang_reload_posts_update_weights_from_disk_to_every_replica() -> None:
    with _sglang_ok() as r1, _sglang_ok() as r2:
        with make_reload_adapter("sglang", [r1.url, r2.url + "/v1"]) as adapter:
            outcomes = adapter.reload(SNAP, 7)
            assert adapter.policy_version == 7
        assert [o.ok for o in outcomes] == [True, True]
        for engine in (r1, r2):
            (req,) = engine.requests
            assert (req.method, req.path) == ("POST", "/update_weights_from_disk")
            assert req.body == {
                "model_path": SNAP,
                "weight_version": "7",
                "abort_all_requests": False,
            }


def test_sglang_success_false_is_a_failure() -> None:
    refuse = StandinEngine(
        {("POST", "/update_weights_from_disk"): (200, {"success": False, "message": "bad shape"})}
    )
    with refuse, SGLangReloadAdapter(refuse.url) as adapter:
        with pytest.raises(ReloadError, match="bad shape") as info:
            adapter.reload(SNAP, 1)
        assert list(info.value.failures) == [refuse.url]
        assert adapter.policy_version is None


def test_vllm_reload_uses_collective_rpc_then_resets_prefix_cache_and_labels() -> None:
    """vLLM 0.32: reload_weights from the snapshot's path (one call), the prefix cache
    dropped, the weights labelled with the version and the label read back."""
    with _vllm_ok() as engine, VLLMReloadAdapter(engine.url, timeout_s=30) as adapter:
        (outcome,) = adapter.reload(SNAP, 3)
        assert adapter.policy_version == 3
        paths = engine.paths()
        assert adapter.served_version(engine.url) == 3  # what vLLM now reports
    assert outcome.detail == f"reloaded {SNAP}"
    assert paths == [
        ("POST", "/collective_rpc"),
        ("POST", "/reset_prefix_cache"),
        *LABEL,
    ]
    assert engine.requests[0].body == {
        "method": "reload_weights",
        "timeout": 30,
        "kwargs": {"weights_path": SNAP},
    }
    assert engine.requests[2].body == {"new_version": "3"}


def test_vllm_reporting_other_weights_than_it_was_given_is_a_failed_reload() -> None:
    engine = _vllm_ok()
    engine.routes[("GET", "/weight_info")] = (200, {"weight_version": "2"})
    with (
        engine,
        VLLMReloadAdapter(engine.url) as adapter,
        pytest.raises(ReloadError, match="reports weights 2, expected 3"),
    ):
        adapter.reload(SNAP, 3)
    assert adapter.policy_version is None


def test_a_vllm_without_the_label_routes_is_reloaded_unlabelled() -> None:
    engine = _vllm_ok()
    del engine.routes[("POST", "/update_weight_version")]
    with engine, VLLMReloadAdapter(engine.url) as adapter:
        (outcome,) = adapter.reload(SNAP, 3)
        assert adapter.policy_version == 3
    assert "unlabelled" in outcome.detail


def test_vllm_pause_wraps_the_reload_and_resumes_on_failure() -> None:
    def rpc(rec: Recorded) -> tuple[int, object]:
        if rec.body["method"] == "reload_weights":
            return 500, {"error": "weights file truncated"}
        return 200, {"results": [None]}

    engine = _vllm_ok()
    engine.routes[("POST", "/collective_rpc")] = rpc
    with (
        engine,
        VLLMReloadAdapter(engine.url, pause=True) as adapter,
        pytest.raises(ReloadError, match="weights file truncated"),
    ):
        adapter.reload(SNAP, 4)
    assert engine.paths()[0] == ("POST", "/pause")
    assert engine.requests[0].query == {"mode": ["wait"]}
    assert engine.paths()[-1] == ("POST", "/resume")


def _adapter_snapshot(folder: Path) -> str:
    """A LoRA snapshot's layout (adapter_config.json, no config.json)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8, "peft_type": "LORA"}')
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return str(folder)


def test_vllm_loads_a_lora_snapshot_as_the_named_adapter(tmp_path: Path) -> None:
    """vLLM serves adapters by name beside the base model: a LoRA snapshot is loaded
    through /v1/load_lora_adapter in place under the run's adapter name (the KV of the
    old adapter dropped); a full snapshot of the same run still reloads the base."""
    snap = _adapter_snapshot(tmp_path / "v3")
    engine = _vllm_ok()
    engine.routes[("POST", "/v1/load_lora_adapter")] = (200, b"Success: LoRA adapter added")
    with engine, VLLMReloadAdapter(engine.url, lora_name="policy-lora") as adapter:
        (outcome,) = adapter.reload(snap, 3)
        assert adapter.policy_version == 3
        assert outcome.detail == f"loaded adapter {snap} as 'policy-lora'"
        adapter.reload(SNAP, 4)
    assert engine.paths() == [
        ("POST", "/v1/load_lora_adapter"),
        ("POST", "/reset_prefix_cache"),
        *LABEL,
        ("POST", "/collective_rpc"),
        ("POST", "/reset_prefix_cache"),
        *LABEL,
    ]
    assert engine.requests[0].body == {
        "lora_name": "policy-lora",
        "lora_path": snap,
        "load_inplace": True,
    }


def test_vllm_without_runtime_lora_loading_says_how_to_start_it(tmp_path: Path) -> None:
    snap = _adapter_snapshot(tmp_path / "v1")
    with (
        _vllm_ok() as engine,  # no /v1/load_lora_adapter route: 404, as vLLM without it
        VLLMReloadAdapter(engine.url, lora_name="policy-lora") as adapter,
        pytest.raises(ReloadError) as info,
    ):
        adapter.reload(snap, 1)
    assert "404" in str(info.value)
    assert "--enable-lora" in str(info.value)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in str(info.value)
    with (
        VLLMReloadAdapter(engine.url) as adapter,
        pytest.raises(ReloadError, match="LoRA snapshot but no lora_name"),
    ):
        adapter.reload(snap, 1)


def test_embedded_reload_checks_the_served_version() -> None:
    ok = StandinEngine(
        {("POST", "/update_weights_from_disk"): (200, {"success": True, "policy_version": 5})}
    )
    stale = StandinEngine(
        {("POST", "/update_weights_from_disk"): (200, {"success": True, "policy_version": 4})}
    )
    with (
        ok,
        stale,
        EmbeddedReloadAdapter([ok.url, stale.url]) as adapter,
        pytest.raises(ReloadError) as info,
    ):
        adapter.reload(SNAP, 5)
    assert list(info.value.failures) == [stale.url]
    assert "serves version 4" in info.value.failures[stale.url]
    assert ok.requests[0].body == {"model_path": SNAP, "version": 5}


def test_unreachable_replica_is_reported_not_raised_raw() -> None:
    with _sglang_ok() as live:
        dead = "http://127.0.0.1:9"  # discard port: connection refused
        with SGLangReloadAdapter([live.url, dead], timeout_s=5) as adapter:
            with pytest.raises(ReloadError) as info:
                adapter.reload(SNAP, 2)
            assert list(info.value.failures) == [dead]
            assert adapter.health() == {live.url: True, dead: False}
        assert len(live.requests) == 2  # the reload and the health check


def test_api_key_is_sent_as_bearer_token() -> None:
    with _sglang_ok() as engine, SGLangReloadAdapter(engine.url, api_key="s3cret") as adapter:
        adapter.reload(SNAP, 1)
    assert engine.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_round_robin_over_replicas() -> None:
    urls = ["http://a:1", "http://b:2/", "http://c:3/v1"]
    with make_reload_adapter("vllm", urls) as adapter:
        picks = [adapter.next_base_url() for _ in range(6)]
    assert picks == ["http://a:1", "http://b:2", "http://c:3"] * 2
    rr = RoundRobin([1, 2])
    assert [rr.next() for _ in range(3)] == [1, 2, 1]


def test_base_url_normalisation() -> None:
    assert normalize_base_url("http://h:1/v1/") == "http://h:1"
    assert normalize_base_urls("http://a:1, http://a:1/v1,http://b:2") == [
        "http://a:1",
        "http://b:2",
    ]
    with pytest.raises(ValueError):
        normalize_base_url("h:1")
    with pytest.raises(ValueError):
        normalize_base_urls([])
