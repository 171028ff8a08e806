"""The EMMA dialogue throughput benchmark runs end to end (a CPU smoke run on the tiny T5; its figures
are not checked: speed is measured on a GPU by hand, see the script's docstring)."""

from __future__ import annotations

import json

from tests.benchmarks._script import load, run


def test_examples_follow_the_task_mix_and_collate_counts_real_tokens():
    bench = load("emma_throughput")
    examples = bench.make_examples(300, 1024, 64, seed=0)
    short = sum(len(s) <= 96 for s, _ in examples) / len(examples)
    assert 0.2 < short < 0.4                                # linking: 30 % of the mix, sources of 32-96 tokens
    assert all(s[-1] == 1 and t[-1] == 1 and len(s) <= 1024 and len(t) <= 64 for s, t in examples)
    collate = bench.RecordingCollate()
    batch = collate([([5, 6, 1], [7, 1]), {"input_ids": [8, 1], "labels": [9, 9, 1]}])
    assert batch["input_ids"].tolist() == [[5, 6, 1], [8, 1, 0]]
    assert batch["labels"].tolist() == [[7, 1, -100], [9, 9, 1]]
    assert collate.batches == [(3 + 2 + 2 + 3, 2 * (3 + 3))]


def test_smoke_run_reports_the_engine_against_seq2seq_trainer(tmp_path):
    out = tmp_path / "emma.json"
    run("emma_throughput", "--spec", "tiny", "--steps", "4", "--skip", "2", "--batch-size", "4", "--max-source", "96",
        "--out", str(out))
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"engine", "hf"} and report["gradient_checkpointing"] is True
    for contender in report["runs"].values():
        assert contender["steps_timed"] == 2 and contender["tokens_per_s"] > 0 and 0 <= contender["padding_share"] < 1
    ratio = report["engine_over_hf"]["tokens_per_s"]
    assert ratio == report["runs"]["engine"]["tokens_per_s"] / report["runs"]["hf"]["tokens_per_s"]
