"""LongMemEval suites scored as the official retrieval code, checked by hand and against a transcription.

The fixture ``tests/fixtures/longmemeval_official/longmemeval_tiny.json`` is a 4-question file in
the published format (see its README.md). Only user turns are indexed (official
``process_item_flat_index``), each as ``"user: <content>"`` tokenised by ``bm25_tokens`` (stop
words removed; the token "user" is in every turn and in no question). BM25 ranking of each
question, derived by overlap counts and checked by ``test_fixture_bm25_rankings_are_as_documented``
(ties at score 0 go to the newer turn; ``<session>:<j>`` = turn j of the session, 0-based, counting
assistant turns):

q1_biscuit  "What breed is my dog Biscuit that I walk every morning?" -> breed dog biscuit walk morning
    1  answer_4be1b6b4_1:0  walk dog biscuit morning (4)   non-evidence user turn of the evidence session
    2  answer_4be1b6b4_1:2  biscuit breed (2)              EVIDENCE
    3  ultrachat_50321:2    dog (1)
    4  sharegpt_x9Lq2Rt_0:0 breed (1)
    5-7 score 0.  (answer_4be1b6b4_1:1 is an assistant turn with has_answer: never indexed, never evidence)
  turn:    R = {rank 2}. recall_any@1 = recall_all@1 = 0, ndcg@1 = 0; at k >= 2 recall = 1 and
           ndcg = (rel_2 / log2 2) / IDCG = 1 / 1 = 1 (the official DCG does not discount rank 2).
           mrr = 1/2.
  session: documents [A#noans, A, ultrachat, sharegpt, ...] (A = answer_4be1b6b4_1; the official ids
           rename A's non-evidence turn to noans_4be1b6b4_1_1, another document). k = 1: top {A#noans}
           -> any = all = ndcg = 0 (a plain deduplicated session ranking would give 1 here).
           k = 3: effective_k 3, A in -> 1, 1; ndcg: relevances [0, 1, 0], one relevant turn in the
           corpus -> 1 / 1 = 1. Same at k = 5, 10, 30, 50.

q2_hobbies  "How many hours did I spend practicing guitar and pottery this month?"
            -> hours did spend practicing guitar pottery month
    1  answer_8c2f1e9a_1:0  month spend hours practicing guitar (5)   EVIDENCE
    2  sharegpt_Rt5Yw1p_0:0 guitar practicing hours (3)
    3  answer_8c2f1e9a_2:0  pottery (1)                               EVIDENCE
    4-6 score 0
  turn:    R = {rank 1, rank 3}. k = 1: any 1, all 0, ndcg 1 / 1 = 1, recall@1 = 1/2.
           k >= 3: any 1, all 1, ndcg = (1 + 1/log2 3) / (1 + 1/log2 2) = 1.630930 / 2 = 0.815465.
           mrr = 1.
  session: every turn is its own session, all documents distinct -> effective_k = k and the same
           values as the turn level.

q3_mochi_abs  abstention (_abs): left out. (Scored, its evidence would rank 2nd: every mean at k = 1
            would change, e.g. turn recall_any@1 = 1/4 instead of 1/3.)

q4_sourdough  "When did I start baking sourdough bread at home?" -> did start baking sourdough bread home
    1  sharegpt_Kd93jF2_0:2  baking sourdough bread (3)
    2  sharegpt_Kd93jF2_0:0  sourdough bread home (3, a longer turn: lower score)
    3  ultrachat_220981:0    baking home (2)
    4  answer_d5e6f7a8_1:2   bread (1)                                EVIDENCE
    5-8 score 0 (answer_d5e6f7a8_1:0, the evidence session's other user turn, among them)
  turn:    R = {rank 4}. k = 1, 3: 0, 0, ndcg 0. k >= 5: 1, 1, ndcg = (1/log2 4) / 1 = 0.5. mrr = 1/4.
  session: documents [K, K, U, A, ...]. k = 1: 0. k = 3: the first 3 turns hold 2 documents ->
           effective_k = 4 -> A in: any = all = 1 (the turn level is 0 at k = 3), ndcg = DCG@4 / IDCG@4
           = (1/log2 4) / 1 = 0.5. k = 5: effective_k 6, still 1, 1, 0.5; k >= 10: the whole ranking.

Means over the three scored questions (q1, q2, q4), as the official print (non-_abs questions):

    metric            k=1      k=3                           k=5, 10, 30, 50
    turn recall_any   1/3      (1+1+0)/3 = 2/3               1
    turn recall_all   0        (1+1+0)/3 = 2/3               1
    turn ndcg_any     1/3      (1+0.815465+0)/3 = 0.605155   (1+0.815465+0.5)/3 = 0.771822
    session recall_any 1/3     1                             1
    session recall_all 0       1                             1
    session ndcg_any  1/3      (1+0.815465+0.5)/3 = 0.771822 0.771822
    turn mrr = (1/2 + 1 + 1/4)/3 = 0.583333; turn recall@1 = (0 + 1/2 + 0)/3 = 1/6; queries = 3;
    session mrr (ours, from the deduplicated session ranking: 1, 1, 1/3) = 7/9.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from tests._cli import REPO, run_cli, tmp_project

from pipelines.evaluate.metrics import (dcg, longmemeval_turn2session, ndcg_any_at_k, recall_all_at_k,
                                        recall_any_at_k)

FIXTURE = REPO / "tests" / "fixtures" / "longmemeval_official" / "longmemeval_tiny.json"
KS = (1, 3, 5, 10, 30, 50)  # the longmemeval_s suite's cut-offs (the official ones too)

L3 = 1 / math.log2(3)
Q2_NDCG = (1 + L3) / 2  # 0.815465...

# Per question, hand-derived (module docstring): {granularity: {metric: {k: value}}}.
PER_QUESTION = {
    "q1_biscuit": {
        "turn": {"recall_any": {1: 0, 3: 1, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 1, 5: 1, 10: 1},
                 "ndcg_any": {1: 0, 3: 1, 5: 1, 10: 1}},
        "session": {"recall_any": {1: 0, 3: 1, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 1, 5: 1, 10: 1},
                    "ndcg_any": {1: 0, 3: 1, 5: 1, 10: 1}},
    },
    "q2_hobbies": {
        "turn": {"recall_any": {1: 1, 3: 1, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 1, 5: 1, 10: 1},
                 "ndcg_any": {1: 1, 3: Q2_NDCG, 5: Q2_NDCG, 10: Q2_NDCG}},
        "session": {"recall_any": {1: 1, 3: 1, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 1, 5: 1, 10: 1},
                    "ndcg_any": {1: 1, 3: Q2_NDCG, 5: Q2_NDCG, 10: Q2_NDCG}},
    },
    "q4_sourdough": {
        "turn": {"recall_any": {1: 0, 3: 0, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 0, 5: 1, 10: 1},
                 "ndcg_any": {1: 0, 3: 0, 5: 0.5, 10: 0.5}},
        "session": {"recall_any": {1: 0, 3: 1, 5: 1, 10: 1}, "recall_all": {1: 0, 3: 1, 5: 1, 10: 1},
                    "ndcg_any": {1: 0, 3: 0.5, 5: 0.5, 10: 0.5}},
    },
}

# The means (the table at the end of the module docstring); k = 30 and 50 equal k = 10 here.
_AT = {1: 0, 3: 1, 5: 2, 10: 3, 30: 3, 50: 3}
_TABLE = {
    "turn/recall_any": (1 / 3, 2 / 3, 1.0, 1.0),
    "turn/recall_all": (0.0, 2 / 3, 1.0, 1.0),
    "turn/ndcg_any": (1 / 3, (1 + Q2_NDCG) / 3, (1.5 + Q2_NDCG) / 3, (1.5 + Q2_NDCG) / 3),
    "session/recall_any": (1 / 3, 1.0, 1.0, 1.0),
    "session/recall_all": (0.0, 1.0, 1.0, 1.0),
    "session/ndcg_any": (1 / 3, (1.5 + Q2_NDCG) / 3, (1.5 + Q2_NDCG) / 3, (1.5 + Q2_NDCG) / 3),
}
EXPECTED = {f"{name}@{k}": values[_AT[k]] for name, values in _TABLE.items() for k in KS}
EXPECTED.update({"turn/mrr": (0.5 + 1 + 0.25) / 3, "turn/recall@1": 1 / 6, "session/mrr": 7 / 9, "queries": 3.0})

RANKINGS = {  # the BM25 ranking of each question's indexed (user) turns, best first (module docstring)
    "q1_biscuit": ["answer_4be1b6b4_1:0", "answer_4be1b6b4_1:2", "ultrachat_50321:2", "sharegpt_x9Lq2Rt_0:0",
                   "e0a1c2d3_4:0", "ultrachat_50321:0", "sharegpt_x9Lq2Rt_0:2"],
    "q2_hobbies": ["answer_8c2f1e9a_1:0", "sharegpt_Rt5Yw1p_0:0", "answer_8c2f1e9a_2:0", "7f3e2a1b_2:0",
                   "ultrachat_118734:0", "sharegpt_Rt5Yw1p_0:2"],
    "q3_mochi_abs": ["sharegpt_Qw8Er4t_0:0", "answer_91ab3c7d_1:0", "ultrachat_77120:0", "answer_91ab3c7d_1:2"],
    "q4_sourdough": ["sharegpt_Kd93jF2_0:2", "sharegpt_Kd93jF2_0:0", "ultrachat_220981:0", "answer_d5e6f7a8_1:2",
                     "sharegpt_Zx1Cv2b_0:0", "e4f5a6b7_3:2", "e4f5a6b7_3:0", "answer_d5e6f7a8_1:0"],
}
EVIDENCE = {"q1_biscuit": ["answer_4be1b6b4_1:2"], "q2_hobbies": ["answer_8c2f1e9a_1:0", "answer_8c2f1e9a_2:0"],
            "q3_mochi_abs": ["answer_91ab3c7d_1:0"], "q4_sourdough": ["answer_d5e6f7a8_1:2"]}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``benchmark --suite longmemeval_s --path <fixture> --strategies bm25`` once for the module."""
    tmp = tmp_path_factory.mktemp("lme_cli")
    root, out = tmp_project(tmp / "project"), tmp / "report"
    proc = run_cli(["benchmark", "--suite", "longmemeval_s", "--path", str(FIXTURE), "--strategies", "bm25",
                    "--out", str(out), "--cache-dir", str(tmp / "cache"), "--no-answers", "-q"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


# --- the CLI on the fixture, against the hand-computed values ---------------------


def test_cli_metrics_equal_hand_computed(cli_run):
    proc, out = cli_run
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last == json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    got = last["longmemeval_s"]["bm25"]
    missing = sorted(set(EXPECTED) - set(got))
    assert not missing, f"metrics.json lacks {missing}"
    wrong = {key: (got[key], want) for key, want in EXPECTED.items() if got[key] != pytest.approx(want, abs=1e-9)}
    assert not wrong, f"(got, expected by hand): {wrong}"


def test_cli_per_question_values_and_abstention_left_out(cli_run):
    _, out = cli_run
    rows = [json.loads(line) for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["query_id"] for r in rows} == set(PER_QUESTION)  # q3_mochi_abs (abstention) is not scored
    assert all(r["suite"] == "longmemeval_s" and r["strategy"] == "bm25" for r in rows)
    by = {(r["query_id"], r["granularity"]): r for r in rows}
    for qid, grans in PER_QUESTION.items():
        for granularity, metrics in grans.items():
            row = by[(qid, granularity)]
            for metric, at in metrics.items():
                for k, want in at.items():
                    got = row["metrics"][f"{metric}@{k}"]
                    assert got == pytest.approx(want, abs=1e-9), (qid, granularity, metric, k)
    assert by[("q2_hobbies", "turn")]["n_evidence"] == 2
    # q1's evidence session also holds an assistant turn with has_answer: it is not evidence (user turns only)
    assert by[("q1_biscuit", "turn")]["n_evidence"] == 1


def test_fixture_bm25_rankings_are_as_documented():
    """The rankings the hand computation starts from (in process, the protocol's own pieces)."""
    from pipelines.evaluate.suite import load_suite, suite_episodes
    from pipelines.memory import build_strategy

    episodes = suite_episodes(load_suite("longmemeval_s"), FIXTURE)
    assert [e.id for e in episodes] == list(RANKINGS)
    for episode in episodes:
        assert all(t.speaker == "user" for s in episode.sessions for t in s.turns)  # corpus: main_speaker
        query = episode.queries[0]
        assert query.evidence_turns == EVIDENCE[episode.id]
        assert query.abstention == episode.id.endswith("_abs")
        bm25 = build_strategy("bm25")
        for session in sorted(episode.sessions, key=lambda s: s.index):
            bm25.observe(episode, session)
        items = bm25.retrieve(query, len(bm25))
        assert [i.turn_id for i in items] == RANKINGS[episode.id]
        positive = [i.score for i in items if i.score > 0]
        if episode.id != "q4_sourdough":  # q4's top two are one session: their order cannot matter
            assert len(set(positive)) == len(positive), f"{episode.id}: tied positive scores {positive}"


# --- longmemeval_turn2session on hand-made rankings --------------------------------

SESSIONS = {"A1": "A", "A2": "A", "B1": "B", "C1": "C", "E1": "E", "E2": "E", "E3": "E", "F1": "F",
            "X1": "X", "Y1": "Y"}


def t2s(ranking, evidence, k):
    return longmemeval_turn2session(ranking, SESSIONS, evidence, k)


def test_turn2session_widens_k_until_k_distinct_sessions():
    ranking = ["A1", "A2", "B1", "C1"]
    # k = 2: A1, A2 hold one session -> effective_k 3 (A, B): C not reached
    assert t2s(ranking, {"C1"}, 2) == {"recall": 0.0, "recall_any": 0.0, "recall_all": 0.0, "ndcg_any": 0.0}
    # k = 3: effective_k 4 -> C in; ndcg = (1/log2 4) / 1 = 0.5 (a deduplicated ranking [A, B, C] gives 1/log2 3)
    assert t2s(ranking, {"C1"}, 3) == {"recall": 1.0, "recall_any": 1.0, "recall_all": 1.0, "ndcg_any": 0.5}
    # k beyond the number of sessions: the whole ranking
    assert t2s(["A1", "A2"], {"A2"}, 5)["recall_all"] == 1.0
    # the official discount: rank 1 and rank 2 both count 1, so the evidence at rank 2 of 2 distinct
    # sessions scores ndcg 1
    assert t2s(["B1", "C1", "A1"], {"C1"}, 2)["ndcg_any"] == 1.0


def test_turn2session_noans_split():
    """A non-evidence turn of an evidence session is another document (official ``noans`` ids)."""
    ranking = ["E2", "E1", "X1"]
    at1 = t2s(ranking, {"E1"}, 1)  # the top turn is E's, but not an evidence turn: E#noans, not E
    assert at1 == {"recall": 0.0, "recall_any": 0.0, "recall_all": 0.0, "ndcg_any": 0.0}
    # k = 2: E#noans and E are two documents -> effective_k 2 (not 3): E in, ndcg = (1/log2 2) / 1 = 1
    assert t2s(ranking, {"E1"}, 2) == {"recall": 1.0, "recall_any": 1.0, "recall_all": 1.0, "ndcg_any": 1.0}
    # a session with no evidence turn is one document however many of its turns rank: widening
    assert t2s(["A1", "A2", "E1"], {"E1"}, 2)["recall_any"] == 1.0


def test_turn2session_ndcg_counts_every_evidence_turn():
    ranking = ["X1", "E1", "E3", "E2", "F1", "Y1"]  # documents X, E, E#noans, E, F, Y
    evidence = {"E1", "E2", "F1"}                   # relevant documents {E, F}; three relevant turns
    # k = 3: effective_k 3; relevances [0, 1, 0]; IDCG@3 over [1, 1, 1] = 1 + 1 + 1/log2 3
    assert t2s(ranking, evidence, 3) == pytest.approx(
        {"recall": 0.5, "recall_any": 1.0, "recall_all": 0.0, "ndcg_any": 1 / (2 + L3)})
    # k = 4: X, E, E#noans, E hold 3 documents -> effective_k 5 (F); both E turns count:
    # DCG = 1/log2 2 + 1/log2 4 + 1/log2 5, IDCG@5 = 1 + 1 + 1/log2 3
    want = (1 + 0.5 + 1 / math.log2(5)) / (2 + L3)
    assert t2s(ranking, evidence, 4) == pytest.approx(
        {"recall": 1.0, "recall_any": 1.0, "recall_all": 1.0, "ndcg_any": want})
    assert want == pytest.approx(1.930677 / 2.630930, abs=1e-6)  # 0.733838


def test_turn2session_rejects_empty_evidence_and_bad_k():
    with pytest.raises(ValueError, match="empty"):
        t2s(["A1"], set(), 1)
    with pytest.raises(ValueError, match="positive"):
        t2s(["A1"], {"A1"}, 0)


def test_turn_metrics_official_quirks_by_hand():
    # rank 2 is not discounted: ndcg 1 for a single evidence item at rank 2
    assert ndcg_any_at_k(["x", "e"], {"e"}, 3) == 1.0
    assert ndcg_any_at_k(["e", "x", "f"], {"e", "f"}, 3) == pytest.approx((1 + L3) / 2)
    assert dcg([0, 0, 0, 1], 4) == 0.5


# --- a literal transcription of the official code (LongMemEval src/retrieval) -----------
# eval_utils.py: dcg, ndcg, evaluate_retrieval, evaluate_retrieval_turn2session; run_retrieval.py:
# process_item_flat_index (turn granularity) and correct_docs. Kept as close to the original as
# possible (np.asfarray, gone in NumPy 2, becomes np.asarray(..., dtype=float)).


def official_dcg(relevances, k):
    relevances = np.asarray(relevances, dtype=float)[:k]
    if relevances.size:
        return relevances[0] + np.sum(relevances[1:] / np.log2(np.arange(2, relevances.size + 1)))
    return 0.


def official_ndcg(rankings, correct_docs, corpus_ids, k=10):
    relevances = [1 if doc_id in correct_docs else 0 for doc_id in corpus_ids]
    sorted_relevances = [relevances[idx] for idx in rankings[:k]]
    ideal_relevance = sorted(relevances, reverse=True)
    ideal_dcg = official_dcg(ideal_relevance, k)
    actual_dcg = official_dcg(sorted_relevances, k)
    if ideal_dcg == 0:
        return 0.
    return actual_dcg / ideal_dcg


def official_evaluate_retrieval(rankings, correct_docs, corpus_ids, k=10):
    recalled_docs = set(corpus_ids[idx] for idx in rankings[:k])
    recall_any = float(any(doc in recalled_docs for doc in correct_docs))
    recall_all = float(all(doc in recalled_docs for doc in correct_docs))
    ndcg_score = official_ndcg(rankings, correct_docs, corpus_ids, k)
    return recall_any, recall_all, ndcg_score


def official_evaluate_retrieval_turn2session(rankings, correct_docs, corpus_ids, k=10):
    def strip_turn_id(docid):
        return '_'.join(docid.split('_')[:-1])
    correct_docs = list(set([strip_turn_id(x) for x in correct_docs]))
    corpus_ids = [strip_turn_id(x) for x in corpus_ids]
    effective_k = k
    unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])
    while effective_k <= len(corpus_ids) and len(unique_docids) < k:
        effective_k += 1
        unique_docids = set(corpus_ids[idx] for idx in rankings[:effective_k])
    return official_evaluate_retrieval(rankings, correct_docs, corpus_ids, k=effective_k)


def official_turn_ids(data, sess_id):
    """process_item_flat_index(data, 'turn', sess_id, ts)'s ids."""
    ids = []
    for i_turn, turn in enumerate(data):
        if turn['role'] == 'user':
            if 'answer' not in sess_id:
                ids.append(sess_id + '_' + str(i_turn + 1))
            elif turn['has_answer']:
                ids.append(sess_id + '_' + str(i_turn + 1))
            else:
                ids.append((sess_id + '_' + str(i_turn + 1)).replace('answer', 'noans'))
    return ids


def random_haystack(rng: random.Random) -> tuple[list[str], list[list[dict]]]:
    """Sessions in the published shape, ids as the real data's; at least one user has_answer turn."""
    while True:
        ids, sessions = [], []
        for i in range(rng.randint(1, 7)):
            evidence_session = rng.random() < 0.4
            others = [f"sharegpt_{rng.getrandbits(24):06x}_{i}", f"ultrachat_{rng.randint(1, 99999)}{i}",
                      f"{rng.getrandbits(32):08x}_{i}"]
            sid = f"answer_{rng.getrandbits(32):08x}_{i}" if evidence_session else rng.choice(others)
            turns = []
            for j in range(rng.randint(1, 6)):
                role = "user" if j % 2 == 0 or rng.random() < 0.2 else "assistant"
                turns.append({"role": role, "content": f"turn {j}",
                              "has_answer": evidence_session and rng.random() < 0.4})
            ids.append(sid)
            sessions.append(turns)
        if any(t["has_answer"] and t["role"] == "user" for s in sessions for t in s):
            return ids, sessions


def test_metrics_equal_the_official_code_on_random_rankings():
    rng = random.Random(20250101)
    cases = 0
    for _ in range(400):
        sids, sessions = random_haystack(rng)
        # the official corpus and ours, turn by turn, in the same order
        corpus_ids, ours, turn_session, evidence = [], [], {}, set()
        for sid, data in zip(sids, sessions):
            corpus_ids += official_turn_ids(data, sid)
            for j, turn in enumerate(data):
                if turn["role"] == "user":
                    ours.append(f"{sid}:{j}")
                    turn_session[ours[-1]] = sid
                    if turn["has_answer"]:
                        evidence.add(ours[-1])
        correct_docs = list(set([doc_id for doc_id in corpus_ids if "answer" in doc_id]))
        rankings = list(range(len(corpus_ids)))
        rng.shuffle(rankings)
        ranked = [ours[i] for i in rankings]
        for k in (1, 2, 3, 5, 10, 30, 50):
            want_turn = official_evaluate_retrieval(rankings, correct_docs, corpus_ids, k=k)
            got_turn = (recall_any_at_k(ranked, evidence, k), recall_all_at_k(ranked, evidence, k),
                        ndcg_any_at_k(ranked, evidence, k))
            assert got_turn == pytest.approx(want_turn, abs=1e-12), (sids, sessions, rankings, k)
            want_session = official_evaluate_retrieval_turn2session(rankings, correct_docs, corpus_ids, k=k)
            got = longmemeval_turn2session(ranked, turn_session, evidence, k)
            assert (got["recall_any"], got["recall_all"], got["ndcg_any"]) == pytest.approx(
                want_session, abs=1e-12), (sids, sessions, rankings, k)
            cases += 1
    assert cases == 400 * 7
