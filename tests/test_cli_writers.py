"""``python -m pipelines benchmark`` with memory writers through the LLM layer: a suite file sets the graph's extractor
and the session summaries to a local model (the tiny random Llama), and ``--llm-cache-dir`` moves their response
cache; a subprocess against a temporary project folder, on the LoCoMo loader's fixture."""

from __future__ import annotations

import json
import re

from tests._cli import LOCOMO_FIXTURE, run_cli, tmp_project


def test_a_suite_file_has_an_llm_write_the_memories_into_the_given_llm_cache(tmp_path, tiny_llama):
    writer = {"backend": "local", "model": str(tiny_llama), "device": "cpu", "max_new_tokens": 4}
    suite = tmp_path / "locomo_llm.yaml"
    suite.write_text(json.dumps({
        "name": "locomo_llm", "version": 1, "source": "locomo", "split": "all",
        "strategies": ["bm25", "graph", "session_summary"],
        "strategy_settings": {"graph": {"extraction": "llm", "extractor_llm": writer, "importance": "uniform",
                                        "embedder": "hashing"},
                              "session_summary": {"summaries": "llm", "summary_llm": writer}}}))
    root, cache = tmp_project(tmp_path / "project"), tmp_path / "llm"
    proc = run_cli(["benchmark", "--suite", str(suite), "--path", str(LOCOMO_FIXTURE), "--out", str(tmp_path / "out"),
                    "--cache-dir", str(tmp_path / "embeddings"), "--llm-cache-dir", str(cache), "--no-answers", "-q"],
                   root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["locomo_llm"]
    assert "missing" not in metrics["graph"] and "missing" not in metrics["session_summary"]
    roles = {re.search(r"mnemos: (\S+) \(", line).group(1) for line in proc.stderr.splitlines()
             if "requests," in line and "from the response cache" in line}
    assert roles == {"graph.extractor_llm", "session_summary.summary_llm"}         # what their calls cost, logged
    asked = [json.loads(p.read_text()) for p in (cache / "responses").glob("??/*.json")]
    assert asked and {a["settings"]["max_new_tokens"] for a in asked} == {4}
    assert not (root / ".cache" / "llm").exists()                                   # nothing in the project's
