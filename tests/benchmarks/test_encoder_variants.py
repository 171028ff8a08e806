"""benchmarks/encoder_variants.py: cold benchmark runs per encoder variant, figures side by side."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.benchmarks._script import ROOT, load, run


def test_a_variant_is_set_on_every_strategy_that_embeds_and_on_the_cross_encoder(tmp_path):
    bench = load("encoder_variants")
    chosen = bench.settings("openvino:none:bf16", ["bm25", "dense", "fusion_time", "rerank"], tmp_path)
    assert sorted(chosen) == ["dense", "fusion_time", "rerank"]                  # bm25 embeds nothing
    assert chosen["dense"] == {"backend": "openvino", "quantization": "none", "precision": "bf16",
                               "export_dir": str(tmp_path)}
    assert chosen["rerank"]["rerank_backend"] == "openvino" and chosen["rerank"]["rerank_quantization"] == "none"
    assert "rerank_backend" not in bench.settings("auto:auto:auto", ["rerank"], tmp_path)["rerank"]
    with pytest.raises(SystemExit, match="backend:quantization:precision"):
        bench.parse_variant("openvino:none")


@pytest.mark.slow
def test_two_variants_run_cold_and_their_figures_are_compared(tmp_path):
    data = tmp_path / "lme.json"
    run("make_longmemeval_like", "--out", str(data), "--questions", "2", "--sessions-per-question", "3",
        "--unique-sessions", "6", "--turns", "4", "--words-per-turn", "20", "--blank-turns", "0")
    work = tmp_path / "work"
    done = run("encoder_variants", "--suite", "longmemeval_s", "--path", str(data), "--work", str(work),
               "--variants", "torch:none:fp32,openvino:none:fp32", "--strategies", "bm25,dense,hybrid")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["variant"] for r in rows] == ["torch:none:fp32", "openvino:none:fp32"]
    for row in rows:
        assert row["wall_s"] > 0 and row["peak_rss_gb"] > 0
        assert set(row["dense"]) >= {"session/recall_all@5", "session/ndcg_any@10", "latency_ms_p50"}
    assert rows[0]["dense"]["session/recall_all@5"] == rows[1]["dense"]["session/recall_all@5"]   # fp32 both
    table = done.stdout.split("max |move|")[1]
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "encoder_variants.py"), "--suite", "longmemeval_s",
                          "--path", str(tmp_path / "absent.json"), "--work", str(tmp_path / "bad"),
                          "--variants", "torch:none:fp32", "--strategies", "bm25"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "torch:none:fp32" in bad.stdout and "failed" in bad.stdout   # never a silent 0
    assert "openvino:none:fp32" in table and "0.0000" in table
    assert json.loads((work / "variants.json").read_text())["openvino:none:fp32"] == rows[1]
    for slug in ("torch-none-fp32", "openvino-none-fp32"):      # each variant cold: its own cache and report
        assert (work / f"cache-{slug}" / "embeddings.sqlite3").is_file()
        assert (work / f"report-{slug}" / "metrics.json").is_file()
