"""The LLM throughput benchmark runs end to end (a CPU smoke run on the tiny random Llama of tests/llm, both
backends, the server started by the script; its speed figures are not checked: they are measured by hand,
see the script's docstring)."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks._script import load, run
from tests.llm._tiny import write_tiny_llama


def test_questions_are_a_short_dated_memory_context_and_a_question_about_it():
    bench = load("llm_throughput")
    questions = bench.make_questions(5, seed=3)
    assert questions == bench.make_questions(5, seed=3) and questions != bench.make_questions(5, seed=4)
    for system, user in questions:
        assert system["role"] == "system" and user["role"] == "user"
        memory, question = user["content"].split("\n\nQuestion: ")
        assert memory.startswith("Memories:\n") and memory.count("\n[session ") == 6 and question.endswith("?\nAnswer:")


def test_smoke_run_reports_both_backends_side_by_side(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "llm.json"
    done = run("llm_throughput", "--model", str(model), "--questions", "4", "--max-new-tokens", "6", "--batch-size",
               "2", "--concurrency", "2", "--cache-dir", str(tmp_path / "cache"), "--out", str(out))
    report = json.loads(out.read_text())
    assert json.loads(done.stdout.strip().splitlines()[-1]) == report
    assert set(report["local"]["runs"]) == {"one_at_a_time", "batched_2"}
    assert set(report["openai"]["runs"]) == {"sequential", "concurrent_2"}
    for part in (report["local"], report["openai"]):
        slow, fast = part["runs"].values()
        assert slow["questions"] == fast["questions"] == 4 and slow["completion_tokens"] > 0
        assert part["speedup"] == pytest.approx(fast["questions_per_s"] / slow["questions_per_s"])
        assert part["same_answers"] == 1.0           # greedy, float32: padding changes no answer of the tiny model
    assert "speed-up" in done.stdout and "batched_2" in done.stdout


def test_product_requests_are_a_whole_dated_session_asking_for_tool_call_json():
    bench = load("llm_throughput")
    requests = bench.make_product_requests(3, seed=1)
    assert requests == bench.make_product_requests(3, seed=1)
    for system, user in requests:
        assert system["content"] == bench.PRODUCT_SYSTEM and user["content"].startswith(bench.PRODUCT_TASK)
        session = user["content"].split("<session date=")[1]
        assert session.count("\n") == 41 and session.endswith("</session>")   # 40 turns between its tags


def test_smoke_run_against_serve_llm(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "llm.json"
    run("llm_throughput", "--model", str(model), "--backends", "openai", "--server", "mnemos", "--questions", "4",
        "--max-new-tokens", "6", "--concurrency", "4", "--cache-dir",
        str(tmp_path / "cache"), "--out", str(out))
    report = json.loads(out.read_text())
    assert report["openai"]["server"] == "mnemos serve-llm --batch-size 4"
    assert set(report["openai"]["runs"]) == {"sequential", "concurrent_4"}
    assert report["openai"]["same_answers"] == 1.0
