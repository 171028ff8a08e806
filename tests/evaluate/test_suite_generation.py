"""A suite's ``generation: [mdr]``: MDR's response generation scored on the suite's own data.

Tiny MDR teacher / student / decoder folders are trained here (a few steps each, with the project's
task classes and tokenizer builder, saved by their ``save_final`` exactly as the mdr stages save
them) on a small synthetic dataset under ``<tmp>/models``, then the CC and ConvAI2 suites run on the
loaders' fixtures with ``bm25`` and the generation.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from pipelines.errors import ConfigError, NothingToScore
from pipelines.evaluate.protocol import ProtocolConfig, run_protocol
from pipelines.evaluate.report import write_report
from pipelines.evaluate.suite import Suite, generation_defaults, load_suite, suite_episodes
from pipelines.evaluate.suite_run import SuiteRun, evaluate_suite, run_generation
from pipelines.memory.tokens import TokenCounter

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "loaders" / "fixtures"
CC = FIXTURES / "cc" / "test.jsonl"              # 2 records: (Q, R) rounds in sessions 2 and 4
CONVAI2 = FIXTURES / "convai2" / "valid_self_original.txt"
OVERALL = {"bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "dist-1", "dist-2", "c_dist-1", "c_dist-2",
           "s_dist-1", "s_dist-2", "responses", "examples_total"}
FAST = {"max_new_tokens": 8, "samples": 2, "seed": 7}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``<root>/models/mdr_{teacher,student,decoder}`` trained on a small synthetic dataset, and its examples."""
    from pipelines.data.synthetic import SyntheticConfig, generate
    from pipelines.data.tasks import build_mdr_examples
    from pipelines.mdr.config import MDRConfig
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE, MDRDecoderTask, MDRStudentTask, MDRTeacherTask, gpt2_factory
    from pipelines.mdr.teacher import MDRTeacher
    from pipelines.mdr.text import Codec
    from pipelines.models.tokenizers import train_bpe_tokenizer
    from tests.mdr.test_tasks import _train

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("project")
    models = root / "models"
    episodes = generate(SyntheticConfig(episodes=3, sessions=3, turns=6, partners=2, seed=5))
    cfg = MDRConfig(model="tiny", hops=2, max_query_tokens=16, max_response_tokens=16, max_persona_tokens=24,
                    max_history_tokens=24, max_history_rounds=3)
    examples = build_mdr_examples(episodes, max_history_rounds=cfg.max_history_rounds,
                                  memory_persona=cfg.memory_persona)
    codec = Codec(train_bpe_tokenizer([t for e in examples for t in (e.query, e.response, *e.persona)], 300,
                                      min_frequency=1))
    torch.manual_seed(0)
    gpt2 = gpt2_factory("tiny", codec)
    teacher_task = MDRTeacherTask(cfg, examples, None, codec, gpt2)
    teacher_task.save_final(_train(teacher_task, 2, 1e-2)[0], models / "mdr_teacher")
    teacher = MDRTeacher.load(models / "mdr_teacher")
    student_task = MDRStudentTask(cfg, examples, None, codec, teacher, gpt2, cache_examples=examples)
    student_task.save_final(_train(student_task, 2, 3e-3)[0], models / "mdr_student")
    cache = load_response_features(models / "mdr_student" / FEATURES_FILE)
    decoder_task = MDRDecoderTask(cfg, examples, None, codec, teacher, cache)
    decoder_task.save_final(_train(decoder_task, 2, 1e-2)[0], models / "mdr_decoder")
    yield root, episodes, examples
    torch.set_num_threads(before)


def _settings(root: Path, **changes) -> dict:
    mdr = {**generation_defaults(["mdr"], root)["mdr"], **FAST, **changes}
    return {"mdr": mdr}


@pytest.fixture(scope="module")
def cc_report(models, tmp_path_factory):
    root, _, _ = models
    suite = load_suite("cc").with_overrides(strategies=("bm25",))
    episodes = suite_episodes(suite, CC)
    run = evaluate_suite(suite, episodes, show_progress=False, generation=_settings(root))
    out_dir = tmp_path_factory.mktemp("cc_report")
    return run, write_report([run], out_dir, profile="tiny"), out_dir


def test_generation_metrics_in_metrics_json(cc_report):
    run, out, out_dir = cc_report
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics == out["metrics"]
    assert set(metrics["cc"]) == {"bm25", "mdr_generation"}
    gen = metrics["cc"]["mdr_generation"]
    assert OVERALL <= set(gen)
    assert gen["responses"] == 3.0 and gen["examples_total"] == 3.0
    assert all(0.0 <= gen[k] <= 100.0 for k in ("bleu-1", "bleu-4", "rouge-l"))
    assert all(0.0 <= gen[k] <= 1.0 for k in ("c_dist-1", "c_dist-2", "s_dist-1", "s_dist-2"))
    # per session: only the sessions the fixture's rounds are in (2 and 4), every metric, S-Dist too
    sessions = {k.split("/")[0] for k in gen if k.startswith("session_")}
    assert sessions == {"session_2", "session_4"}
    for s in sessions:
        assert {f"{s}/{m}" for m in ("bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "c_dist-1",
                                      "c_dist-2", "s_dist-1", "s_dist-2", "responses")} <= set(gen)
    assert gen["session_2/responses"] + gen["session_4/responses"] == 3.0
    assert gen["sessions_2-5/bleu-1"] == pytest.approx((gen["session_2/bleu-1"] + gen["session_4/bleu-1"]) / 2)
    assert run.generation_missing == {} and out["generation_missing"] == {"cc": {}}


def test_generation_markdown_and_plot(cc_report):
    run, out, out_dir = cc_report
    md = (out_dir / "benchmark.md").read_text()
    section = md.split("### Response generation", 1)[1]
    assert "- response generation: mdr" in md and "(missing:" not in md
    assert "| mdr (this run, profile `tiny`) |" in section
    for system in ("No history (paper)", "Long context (paper)", "G-Long (paper)"):
        assert f"| {system} (not comparable) |" in section
    table = section.split("\n\n")[2].splitlines()
    assert table[0].startswith("| system | bleu-1 | bleu-2 | bleu-3 | bleu-4 | rouge-l |")
    assert "**" not in "\n".join(table)  # reference rows are not comparable: nothing to rank ours against
    glong = next(r for r in table if r.startswith("| G-Long (paper)"))
    assert "| 10.65 | 5.46 |" in glong and glong.count("–") == 8  # bleu-2/3, rouge-l; the rest not published
    assert "#### Response generation by session (mdr)" in section
    assert "| session 2 |" in section and "| session 4 |" in section and "| sessions 2, 4 (mean) |" in section
    plot = out_dir / "plots" / "cc" / "generation_by_session.png"
    assert plot in out["plots"] and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_comparable_reference_is_ranked_with_ours(models, tmp_path):
    root, _, _ = models
    base = load_suite("convai2")
    suite = base.with_overrides(strategies=("bm25",), reference={**base.reference, "comparable": True})
    run = evaluate_suite(suite, suite_episodes(suite, CONVAI2), show_progress=False, generation=_settings(root))
    write_report([run], tmp_path, profile="tiny")
    md = (tmp_path / "benchmark.md").read_text()
    paper = next(r for r in md.splitlines() if r.startswith("| MDR (paper) (comparable) |"))
    assert "**19.40**" in paper and "**19.34**" in paper  # the tiny model is far below the paper


def test_missing_decoder_lists_generation_as_missing(models, tmp_path):
    root, _, _ = models
    suite = load_suite("convai2").with_overrides(strategies=("bm25",))
    episodes = suite_episodes(suite, CONVAI2)
    generation = _settings(root, decoder=str(tmp_path / "no-decoder"))
    # ConvAI2 has no query: without its generation the suite scores nothing, which is an error naming why
    with pytest.raises(NothingToScore, match=r"scores nothing.*no response generation was scored \(mdr: .*mdr_decoder") \
            as caught:
        evaluate_suite(suite, episodes, show_progress=False, generation=generation)
    assert "generator asked says above why it did not run" in caught.value.hint   # the data is not at fault
    # how the report shows the missing generator (the run evaluate_suite refuses to return, built by hand)
    counter = TokenCounter.from_config(None)
    protocol = ProtocolConfig(ks=suite.ks, budget_tokens=suite.budget_tokens, show_progress=False,
                              session_scoring=suite.session_scoring)
    scored, not_scored = run_generation(suite, episodes, generation, show_progress=False)
    run = SuiteRun(suite, len(episodes), {"bm25": run_protocol(episodes, "bm25", protocol, {}, counter)}, {},
                   counter, scored, not_scored)
    assert run.generation == {} and "mdr_decoder" in run.generation_missing["mdr"]
    out = write_report([run], tmp_path / "report", profile="tiny")
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert set(metrics["convai2"]) == {"bm25", "mdr_generation"}
    assert metrics["convai2"]["mdr_generation"] == {"missing": run.generation_missing["mdr"]}  # never zeros
    assert "run stage 'mdr_decoder' first" in out["generation_missing"]["convai2"]["mdr"]
    md = (tmp_path / "report" / "benchmark.md").read_text()
    assert "- response generation: mdr (missing: mdr)" in md
    row = next(r for r in md.splitlines() if r.startswith("| mdr (this run, profile `tiny`) |"))
    assert "missing: generation 'mdr': decoder = " in row and "mdr_decoder" in row
    assert "| MDR (paper) (not comparable) | 19.40 |" in md
    assert not (tmp_path / "report" / "plots" / "convai2" / "generation_by_session.png").exists()


def test_suite_generation_keys_are_validated():
    base = dict(name="x", version=1, source="canonical", strategies=("bm25",))
    assert Suite(**base).generation == () and Suite(**base).max_generation_examples == 200
    with pytest.raises(ConfigError, match="generation.*unknown generator"):
        Suite(**base, generation=("emma",))
    with pytest.raises(ConfigError, match="generation"):
        Suite(**base, generation="mdr")
    with pytest.raises(ConfigError, match="max_generation_examples"):
        Suite(**base, generation=("mdr",), max_generation_examples=0)
    assert load_suite("synthetic").generation == ()  # the benchmark stage scores it there already
    for name in ("convai2", "msc", "cc", "locomo", "misc"):
        assert load_suite(name).generation == ("mdr",)


def test_cli_prints_generation_beside_the_paper(models, tmp_path, capsys):
    from pipelines.cli import main

    root, _, _ = models
    code = main(["benchmark", "--suite", "convai2", "--path", str(CONVAI2), "--strategies", "bm25", "--out",
                 str(tmp_path / "out"), "--models-root", str(root), "-q"])
    assert code == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    gen = last["convai2"]["mdr_generation"]
    assert OVERALL <= set(gen) and {k.split("/")[0] for k in gen if "/" in k} == {"session_1"}
    md = (tmp_path / "out" / "benchmark.md").read_text()
    assert "| MDR (paper) (not comparable) | 19.40 |" in md


# --- the MDR side: shared generation code, features, selection --------------------------------

def legacy_evaluate_mdr(decoder_dir, student_dir, examples, *, max_new_tokens=32, samples=5, sample_contexts=32,
                        session_index=None, seed=2022):
    """``evaluate_mdr`` as it was before generation and scoring were shared with the suites (verbatim)."""
    from pipelines.text_metrics import generation_metrics
    from pipelines.mdr.decoder import features_for, generate_responses
    from pipelines.mdr.evaluate import session_number
    from pipelines.mdr.prefix_lm import PrefixLM
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE
    from pipelines.mdr.text import load_codec

    decoder_dir, student_dir = Path(decoder_dir), Path(student_dir)
    decoder = PrefixLM.load(decoder_dir / "decoder")
    codec = load_codec(decoder_dir / "tokenizer")
    cache_path = student_dir / FEATURES_FILE
    feats = features_for([e.id for e in examples], load_response_features(cache_path), source=str(cache_path))
    queries = [e.query for e in examples]
    hyps = generate_responses(decoder, codec, queries, feats, max_new_tokens=max_new_tokens)
    refs = [e.response for e in examples]
    n = min(sample_contexts, len(examples))
    sampled = [generate_responses(decoder, codec, queries[:n], feats[:n], max_new_tokens=max_new_tokens,
                                  do_sample=True, top_k=50, seed=seed + 1000 * s) for s in range(samples)]
    groups = [[sampled[s][i] for s in range(samples)] for i in range(n)]
    out = {"overall": generation_metrics(hyps, refs, samples=groups)}
    by = defaultdict(list)
    for i, e in enumerate(examples):
        num = session_number(e.session_id, session_index or {})
        if num is not None:
            by[num].append(i)
    out["by_session"] = {num: generation_metrics([hyps[i] for i in idx], [refs[i] for i in idx])
                         for num, idx in sorted(by.items())}
    out["examples"] = [{"query": q, "reference": r, "response": h} for q, r, h in zip(queries[:5], refs[:5], hyps[:5])]
    return out


def test_evaluate_mdr_unchanged_by_the_refactor(models):
    from pipelines.mdr.evaluate import evaluate_mdr

    root, episodes, examples = models
    index = {s.id: s.index for e in episodes for s in e.sessions}
    kw = dict(max_new_tokens=8, samples=2, sample_contexts=4, session_index=index, seed=11)
    dec, stu = root / "models" / "mdr_decoder", root / "models" / "mdr_student"
    new, old = evaluate_mdr(dec, stu, examples, **kw), legacy_evaluate_mdr(dec, stu, examples, **kw)
    assert new == old
    assert set(new["by_session"]) == {1, 2, 3} and "s_dist-1" in new["overall"]


def test_student_features_match_the_student_stage_cache(models):
    from pipelines.mdr.evaluate import student_features
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE

    root, _, examples = models
    cache = load_response_features(root / "models" / "mdr_student" / FEATURES_FILE)
    feats = student_features(examples, root / "models" / "mdr_teacher", root / "models" / "mdr_student")
    assert torch.allclose(feats, torch.stack([cache[e.id] for e in examples]), atol=1e-5)


