"""Agent traces (nexrl.core.types.trace): the spans of an episode, the openai_agent
recorder's spans from what its agent service recorded, and the page's HTML table."""

from __future__ import annotations

from typing import Any

from nexrl.core.chat import Generation
from nexrl.core.types.trace import MAX_TEXT, EpisodeTrace, trace_of
from nexrl.driver.dashboard.samples import trace_html
from nexrl.rollout.agent_service.sessions import Call
from nexrl.rollout.worker.openai_agent.recorder import Recorder


def test_episode_trace_spans() -> None:
    trace = EpisodeTrace()
    start = trace.now()
    trace.llm(start, model="m", prompt_tokens=5, completion_tokens=3, finish_reason="stop")
    trace.tool(trace.now(), name="t", arguments={"x": 1}, result="r" * 600, error=None)
    trace.tool(trace.now(), name="t", arguments="{bad", result="error: x", error="error: x")
    llm, ok, bad = trace.spans
    assert (llm["kind"], llm["name"], llm["prompt_tokens"], llm["completion_tokens"]) == (
        "llm",
        "m",
        5,
        3,
    )
    assert ok["arguments"] == {"x": 1} and ok["error"] is None
    assert ok["result"].startswith("r" * MAX_TEXT) and ok["result"].endswith("(+100)")
    assert bad["arguments"] == "{bad" and bad["error"] == "error: x"
    assert llm["start_s"] <= ok["start_s"] <= bad["start_s"]
    assert trace_of({"trace": trace.spans}) == trace.spans
    assert trace_of({}) == [] and trace_of(None) == []


def _gen(tool_calls: list[dict[str, Any]] | None = None) -> Generation:
    return Generation(
        index=0,
        text="",
        policy_version=0,
        token_ids=[1, 2],
        prompt_token_ids=[7, 8, 9],
        logprobs=[-0.1, -0.2],
        finish_reason="tool_calls" if tool_calls else "stop",
        tool_calls=tool_calls or [],
    )


def test_recorder_trace_pairs_tool_calls_with_the_results_sent_back() -> None:
    call = {"id": "c1", "function": {"name": "search", "arguments": '{"q": "x"}'}}
    lost = {"id": "c2", "function": {"name": "calc", "arguments": "{}"}}
    failed = {"id": "c3", "function": {"name": "calc", "arguments": "{}"}}
    calls = [
        Call(0, "chat", (_gen([call, lost, failed]),), started=100.0, duration_s=0.5),
        Call(
            1,
            "chat",
            (_gen(),),
            started=101.0,
            duration_s=0.25,
            tool_results=(
                {"tool_call_id": "c1", "content": "found it"},
                {"tool_call_id": "c3", "content": "error: division by zero"},
            ),
        ),
    ]
    spans = Recorder.trace(calls, "policy")
    assert [(s["kind"], s["name"]) for s in spans] == [
        ("llm", "policy"),
        ("tool", "search"),
        ("tool", "calc"),
        ("tool", "calc"),
        ("llm", "policy"),
    ]
    assert [s["start_s"] for s in spans] == [0.0, 1.0, 0.0, 1.0, 1.0]
    assert (spans[0]["prompt_tokens"], spans[0]["tool_calls"], spans[4]["duration_s"]) == (
        3,
        3,
        0.25,
    )
    assert (spans[1]["result"], spans[1]["error"]) == ("found it", None)
    assert spans[2]["error"] == "no result sent back"
    assert spans[3]["error"] == "error: division by zero"


def test_trace_html_marks_the_failed_call() -> None:
    trace = EpisodeTrace()
    trace.llm(0.0, model="m", prompt_tokens=5, completion_tokens=3, finish_reason="tool_calls")
    trace.tool(0.0, name="calc", arguments={"e": "1/0"}, result="error: boom", error="error: boom")
    page = trace_html(trace.spans)
    assert page.count("<tr") == 3 and "5 + 3" in page and "error: error: boom" in page
    assert page.count("rgba(210,50,50") == 1  # only the failed tool's row is red
    assert trace_html([]) == ""
