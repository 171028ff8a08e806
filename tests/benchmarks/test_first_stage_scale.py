"""The first-stage scale benchmark runs end to end on a tiny store (its latencies are not checked: they
are measured by hand at 100k turns, see the script's docstring)."""

from __future__ import annotations

import json

from pipelines.data.schema import write_episodes
from pipelines.lexical import english_stopwords
from tests.benchmarks._script import load
from tests.memory.conftest import build_episode

CONTENDERS = ("bm25", "dense exact", "dense hnsw", "fusion_time exact", "fusion_time hnsw", "rrf bm25+exact",
              "rrf bm25+hnsw")


def test_synthetic_turns_are_seeded_sentences_of_a_fixed_vocabulary():
    bench = load("first_stage_scale")
    turns = bench.synthetic_turns(30, 500, seed=1)
    assert turns == bench.synthetic_turns(30, 500, seed=1) and turns != bench.synthetic_turns(30, 500, seed=2)
    assert all(text.endswith(".") and text[0].isupper() and 6 <= len(text.split()) <= 24 for _, text in turns)
    vocab = bench.vocabulary(500, seed=1)
    assert len(set(vocab)) == 500 and not set(vocab) & english_stopwords()
    episode = bench.episode_of(turns)
    assert [len(s.turns) for s in episode.sessions] == [10, 10, 10]


def test_smoke_run_prints_a_row_per_contender(capsys, tmp_path):
    bench = load("first_stage_scale")
    out = tmp_path / "report.json"
    report = bench.main(["--n", "400", "--queries", "6", "--k", "10", "--ann-min-items", "100", "--vocab", "300",
                         "--out", str(out)])
    printed = capsys.readouterr().out
    table = printed.split("\n{")[0]
    for name in CONTENDERS:
        assert any(line.startswith(name) for line in table.splitlines()), name
    assert json.loads(printed.strip().splitlines()[-1]) == report == json.loads(out.read_text())
    rows = report["rows"]
    assert set(rows) == set(CONTENDERS) and report["queries"] == 6
    assert all(r["p50_ms"] > 0 and 0 <= r["target_at_k"] <= 1 for r in rows.values())
    # a query's latency is its best of --repeat (3) interleaved runs: never above the median of every run's
    assert report["repeat"] == 3 and all(r["p50_ms"] <= r["single_p50_ms"] for r in rows.values())
    assert rows["dense hnsw"]["graph"] is True and 0 <= rows["dense hnsw"]["recall@k"] <= 1
    # rerank's first stage: from ann_min_items it fuses the union of BM25's and the graph's top k
    assert rows["fusion_time hnsw"]["graph"] is True and 0 <= rows["fusion_time hnsw"]["recall@k"] <= 1
    assert rows["fusion_time hnsw"]["size_mb"] > rows["fusion_time exact"]["size_mb"] > rows["dense exact"]["size_mb"]
    assert rows["bm25"]["size_mb"] > 0 and rows["dense exact"]["size_mb"] == 400 * 384 * 4 / 2**20


def test_turns_of_a_file_are_repeated_to_n(tmp_path, capsys):
    bench = load("first_stage_scale")
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [build_episode()])                   # 9 turns
    turns = bench.file_turns(str(path), "canonical", 20)
    assert len(turns) == 20 and turns[9] == turns[0] == ("Ana", "I adopted a greyhound named Biscuit last week.")
    report = bench.main(["--n", "40", "--queries", "3", "--k", "5", "--ann-min-items", "20", "--path", str(path),
                         "--vectors", "hashing"])
    assert report["data"] == str(path) and report["vectors"] == "hashing" and set(report["rows"]) == set(CONTENDERS)


def test_repeat_must_be_positive(capsys):
    import pytest

    with pytest.raises(SystemExit):
        load("first_stage_scale").main(["--n", "40", "--repeat", "0"])
    assert "--repeat must be at least 1, got 0" in capsys.readouterr().err
