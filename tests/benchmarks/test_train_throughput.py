"""The MDR training-throughput benchmark runs end to end (a CPU smoke run; its figures are not checked:
speed is measured on a GPU by hand, see the script's docstring)."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks._script import load, run


def test_word_codec_reads_ids_written_as_words():
    codec = load("train_throughput").word_codec(512)
    assert codec.encode("w5 w17 w510") == [5, 17, 510]
    assert codec.eos_id == codec.pad_id == 511 and codec.vocab_size == 512


def test_examples_fill_every_budget_so_batches_share_one_shape():
    bench = load("train_throughput")
    args = type("Args", (), {"tiny": True, "batch_size": 4, "vocab": 512, "seq_len": 64, "online_teacher": False,
                             "varlen": False})()
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


def test_varlen_examples_vary_within_half_and_whole_budgets():
    bench = load("train_throughput")
    args = type("Args", (), {"tiny": True, "batch_size": 4, "vocab": 512, "seq_len": 64, "online_teacher": False,
                             "varlen": True})()
    items = bench.build_task("teacher", args).train_dataset()
    cfg = bench.mdr_config(args)
    lengths = {len(items[i]["r"]) - 1 for i in range(len(items))}            # R without its eos
    assert len(lengths) > 1 and lengths <= set(range(cfg.max_response_tokens // 2, cfg.max_response_tokens + 1))
    lm = bench.build_task("lm", args)
    assert {len(it["input_ids"]) for it in lm.train_dataset()} <= set(range(32, 65)) and hasattr(lm, "pack_collate")


def test_levers_are_read_and_skipped_where_they_do_not_apply():
    bench = load("train_throughput")
    assert bench.parse_lever("mode=reduce-overhead+buckets=64:128") == {"compile_mode": "reduce-overhead",
                                                                        "length_buckets": [64, 128]}
    assert bench.parse_lever("pack=256") == {"pack": True, "pack_length": 256}
    assert bench.parse_lever("micro=64x1+fused=false") == {"batch_size": 64, "grad_accum": 1,
                                                           "fused_optimizer": False}
    with pytest.raises(ValueError, match="unknown lever 'speed'"):
        bench.parse_lever("speed=max")
    args = type("Args", (), {"varlen": True})()
    assert "lm stage with --varlen only" in bench.lever_skip("teacher", "pack=256", args)
    assert bench.lever_skip("lm", "pack=256", args) is None and bench.lever_skip("teacher", "buckets=64", args) is None
    args.varlen = False
    assert "add --varlen" in bench.lever_skip("lm", "buckets=64", args)


def test_a_lever_runs_as_one_more_engine_contender(tmp_path):
    out = tmp_path / "levers.json"
    run("train_throughput", "--tiny", "--stages", "lm", "--varlen", "--contenders", "engine", "--lever",
        "pack=64+micro=2x2", "--steps", "4", "--skip", "2", "--out", str(out))
    stage = json.loads(out.read_text())["stages"]["lm"]
    lever, engine = stage["pack=64+micro=2x2"], stage["engine"]
    assert lever["contender"] == "engine[pack=64+micro=2x2]" and "hf" not in stage
    assert lever["settings"] == {"pack": True, "pack_length": 64}
    assert (lever["batch_size"], lever["grad_accum"], engine["batch_size"], engine["grad_accum"]) == (2, 2, 4, 1)
    assert lever["examples_per_s"] == pytest.approx(lever["steps_per_s"] * 4)   # 2 x 2 examples a step
    assert lever["tokens_per_step"] == pytest.approx(engine["tokens_per_step"], rel=0.2)   # unpadded counts
    assert stage["speedup[pack=64+micro=2x2]"] == lever["examples_per_s"] / engine["examples_per_s"]
