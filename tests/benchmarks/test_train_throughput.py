"""The MDR training-throughput benchmark runs end to end (a CPU smoke run; its figures are not checked:
speed is measured on a GPU by hand, see the script's docstring)."""

from __future__ import annotations

import json

from tests.benchmarks._script import load, run


def test_word_codec_reads_ids_written_as_words():
    codec = load("train_throughput").word_codec(512)
    assert codec.encode("w5 w17 w510") == [5, 17, 510]
    assert codec.eos_id == codec.pad_id == 511 and codec.vocab_size == 512


def test_examples_fill_every_budget_so_batches_share_one_shape():
    bench = load("train_throughput")
    args = type("Args", (), {"tiny": True, "batch_size": 4, "vocab": 512, "seq_len": 64, "online_teacher": False})()
    task = bench.build_task("student", args)
    items = task.train_dataset()
    cfg = task.config
    assert {len(items[i]["h"]) for i in range(len(items))} == {cfg.max_history_rounds}
    assert {len(items[i]["q"]) for i in range(len(items))} == {cfg.max_query_tokens + 1}
    assert {len(r) for i in range(len(items)) for r in items[i]["h"]} == {cfg.max_history_tokens + 1}
    assert task.table is not None and len(task.table) > 0      # the student reads precomputed teacher features
    args.online_teacher = True
    assert not bench.build_task("student", args).config.precompute_teacher_features


def test_smoke_run_reports_both_contenders_and_the_ratio(tmp_path):
    out = tmp_path / "throughput.json"
    done = run("train_throughput", "--tiny", "--stages", "decoder", "--steps", "4", "--skip", "2", "--out", str(out))
    report = json.loads(out.read_text())
    stage = report["stages"]["decoder"]
    for contender in ("engine", "hf"):
        res = stage[contender]
        assert res["steps_per_s"] > 0 and res["tokens_per_step"] == 4 * 13      # R 12 tokens + eos, batch 4
        assert res["flops_per_step"] > 0
    assert stage["ratio_engine_over_hf"] == stage["engine"]["steps_per_s"] / stage["hf"]["steps_per_s"]
    assert '"ratio_engine_over_hf"' in done.stdout.splitlines()[-1]
