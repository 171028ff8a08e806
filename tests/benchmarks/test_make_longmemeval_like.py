"""benchmarks/make_longmemeval_like.py: the S shape unchanged, the M shape's haystacks, pool and quirks.

Tiny files only (a few questions of a few short sessions); the 2.7 GB M file is measured by hand
(see the script's docstring).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from pipelines.data.loaders import get_loader
from tests.benchmarks._script import load

SMALL = {"questions": 5, "per_question": 6, "unique": 20, "turns": 4, "words_per_turn": 6, "blank_turns": 2,
         "unordered_questions": 2}


def test_the_s_shape_writes_the_file_it_always_wrote(tmp_path):
    """sha256 of this small S-shaped file as written by the script before the M shape was added."""
    bench = load("make_longmemeval_like")
    shape = bench.write(tmp_path / "s.json", **SMALL)
    assert shape == {"questions": 5, "slots": 30, "unique_sessions": 20, "bytes": 11817, "blank_turns": 2,
                     "unordered_questions": 2}
    assert hashlib.sha256((tmp_path / "s.json").read_bytes()).hexdigest() == \
        "934ea1891ce947103a261949b2391f76ce1165ef525d4887b583952f2a3a1d2f"


def test_shapes_resolve_to_the_published_scale():
    bench = load("make_longmemeval_like")
    assert bench.SHAPES["s"].resolve(500) == {"per_question": 48, "unique": 19000, "blank_turns": 12,
                                              "unordered_questions": 210, "seeded": False}
    assert bench.SHAPES["m"].resolve(500) == {"per_question": 500, "unique": 200000, "blank_turns": 126,
                                              "unordered_questions": 210, "seeded": True}
    assert bench.SHAPES["m"].resolve(50) == {"per_question": 500, "unique": 20000, "blank_turns": 13,
                                             "unordered_questions": 21, "seeded": True}
    assert bench.SHAPES["m"].resolve(50, per_question=10, unique=7, blank_turns=0)["unique"] == 7


def _m_file(bench, path, questions=8, per_question=10, seed=0):
    shape = bench.SHAPES["m"].resolve(questions, per_question, blank_turns=3)
    return bench.write(path, questions, turns=4, words_per_turn=6, seed=seed, **shape)


def test_the_m_shape_has_its_haystacks_pool_and_quirks(tmp_path):
    bench = load("make_longmemeval_like")
    path = tmp_path / "m.json"
    shape = _m_file(bench, path)
    assert shape["slots"] == 80 and shape["unique_sessions"] == 64  # 80% of the slots
    assert (shape["blank_turns"], shape["unordered_questions"]) == (3, 3)  # 42% of 8 questions
    records = json.loads(path.read_text())
    assert [len(r["haystack_sessions"]) for r in records] == [10] * 8
    assert all(len(set(r["haystack_session_ids"])) == 10 for r in records)
    # a session listed by several questions has the same texts in each (has_answer aside)
    texts: dict[str, list] = {}
    for r in records:
        for sid, session in zip(r["haystack_session_ids"], r["haystack_sessions"]):
            texts.setdefault(sid, []).append([t["content"] for t in session])
    assert any(len(v) > 1 for v in texts.values()) and all(v.count(v[0]) == len(v) for v in texts.values())
    blank = {sid for sid, v in texts.items() if "" in v[0]}
    assert len(blank) == 3
    out_of_order = [r["question_id"] for r in records if r["haystack_dates"] != sorted(r["haystack_dates"])]
    assert len(out_of_order) == 3
    loaded = get_loader("longmemeval")(path)
    slots_with_blank = sum(sid in blank for r in records for sid in r["haystack_session_ids"])
    assert loaded.dropped == Counter({"blank_turn": slots_with_blank})
    assert loaded.flagged == Counter({"sessions_sorted_by_date": 3})


def test_the_m_shape_is_seeded(tmp_path):
    bench = load("make_longmemeval_like")
    _m_file(bench, tmp_path / "a.json")
    _m_file(bench, tmp_path / "b.json")
    _m_file(bench, tmp_path / "c.json", seed=1)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() != (tmp_path / "c.json").read_bytes()


def test_the_command_line_writes_an_m_file(tmp_path, capsys):
    bench = load("make_longmemeval_like")
    out = tmp_path / "m.json"
    bench.main(["--shape", "m", "--questions", "3", "--sessions-per-question", "5", "--turns", "2",
                "--words-per-turn", "4", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["shape"] == "m" and printed["slots"] == 15 and printed["unique_sessions"] == 12
    assert printed["bytes"] == out.stat().st_size and len(json.loads(out.read_text())) == 3
