"""The encoder-backend benchmark runs end to end on a few texts (its speeds are not checked: they are measured by
hand, see the script's docstring); its cosines and score differences are."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks._script import load
from tests.rerank._tiny_reranker import save_tiny_cross_encoder


def test_synthetic_texts_are_seeded_and_of_the_asked_length():
    bench = load("embedding_backends")
    long = bench.synthetic_texts(20, 60, ("user",), seed=1)
    assert long == bench.synthetic_texts(20, 60, ("user",), seed=1) != bench.synthetic_texts(20, 60, ("user",), 2)
    assert len(set(long)) == 20 and all(t.startswith("user: ") and 30 <= len(t.split()) - 1 <= 90 for t in long)
    queries = bench.rerank_queries(None, 3, seed=1)
    assert len(queries) == 3 and all(len(texts) == 30 and q.endswith("?") for q, texts in queries)


def test_realmem_queries_are_a_personas_questions_and_its_turns():
    from pathlib import Path

    from pipelines.data.loaders import get_loader

    bench = load("embedding_backends")
    folder = Path(__file__).parents[1] / "data" / "loaders" / "fixtures" / "realmem"
    episodes = get_loader("realmem")(str(folder)).episodes
    questions = {q.question for e in episodes for q in e.queries}
    turns = {f"{t.speaker}: {t.text}" for e in episodes for _, t in e.turns()}
    queries = bench.rerank_queries("ignored.json", 2, seed=1, realmem=str(folder))   # --realmem over --locomo
    assert queries and queries == bench.rerank_queries(None, 2, seed=1, realmem=str(folder))
    assert all(q in questions and texts and set(texts) <= turns for q, texts in queries)


@pytest.mark.slow
def test_smoke_run_prints_every_variant_side_by_side(tmp_path, capsys):
    bench = load("embedding_backends")
    out = tmp_path / "report.json"
    tiny = save_tiny_cross_encoder(tmp_path / "reranker")
    report = bench.main(["--n", "6", "--queries", "2", "--repeat", "2", "--variants", "torch:none,onnx:int8,nope:x",
                         "--batch-sizes", "4", "--reranker", str(tiny),
                         "--out", str(out)])
    printed = capsys.readouterr().out
    assert json.loads(printed.strip().splitlines()[-1]) == report == json.loads(out.read_text())
    rows = [r for r in report["embeddings"] if "missing" not in r]
    assert {(r["variant"], r["texts"]) for r in rows} == {(v, k) for v in ("torch:none", "onnx:int8")
                                                          for k in ("longmemeval", "locomo")}
    assert [r["variant"] for r in report["embeddings"] if "missing" in r] == ["nope:x"]   # reported, not fatal
    for r in rows:
        assert r["texts_per_s"] > 0 and r["n"] == 6 and r["batch_size"] == 4
        assert r["cos_min"] > (0.9999 if r["variant"] == "torch:none" else 0.95)
    bf16 = {"openvino bf16"} if bench.E.cpu_computes_bf16() else set()          # only where the CPU computes it
    assert {r["variant"] for r in report["rerank"]} == {"torch fp32 padded", "torch fp32", "onnx fp32", "onnx int8",
                                                        "openvino fp32", *bf16}
    by_name = {r["variant"]: r for r in report["rerank"]}
    assert max(by_name[name]["max_abs_diff"] for name in ("torch fp32", "onnx fp32", "openvino fp32")) < 1e-4
    assert all(r["ms_per_query"] > 0 for r in report["rerank"])
    for line in ("torch:none", "onnx:int8", "onnx int8", "missing", "Instruction sets: CPU "):
        assert line in printed
    isa = report["isa"]
    assert isa["cpu"] in ("avx512", "avx2", "other") and isa["torch"] and isa["openvino_kernels"] == {}  # no openvino


def test_the_instruction_sets_line_warns_when_a_capped_run_ran_wider_kernels(capsys):
    bench = load("embedding_backends")
    kernels = {"jit_avx2_f32": 34, "gemm_mlas_f32": 24, "jit_avx512_f32": 16}
    bench.print_isa({"cpu": "avx512", "caps": {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "torch": "AVX2",
                     "openvino_kernels": {"openvino:none": kernels}})
    printed = capsys.readouterr().out
    assert "caps ONEDNN_MAX_CPU_ISA=AVX2; torch kernels AVX2" in printed
    assert "74 nodes ran, 16 on AVX-512/AMX kernels, 24 on MLAS GEMMs" in printed
    assert "warning: openvino:none ran kernels past the cap" in printed
    bench.print_isa({"cpu": "avx2", "caps": {}, "torch": "AVX2",
                     "openvino_kernels": {"openvino:none": {"jit_avx2_f32": 34, "gemm_mlas_f32": 24}}})
    assert "warning" not in capsys.readouterr().out                 # an AVX2 CPU: MLAS runs AVX2 there
