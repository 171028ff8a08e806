"""A hand-built answer run (no model) for the aggregate, report and trace tests.

Suite ``synthetic`` over the episode of tests/evaluate/conftest.py: three questions (Q1 single-session, Q2
multi-session, Q5 an abstention question), judged by ``locomo_llm`` (an LLM judge: accuracy; it does not judge
abstention questions) and ``token_f1`` (no model: f1). Readers and the verdicts they get:

    reader / setting        Q1 locomo_llm  Q2 locomo_llm   token_f1 (Q1, Q2, Q5)   context tokens
    bm25 / context          CORRECT        unparseable     1.0, 0.5, 1.0           12, 18, 6
    bm25 / top3             CORRECT        CORRECT         1.0, 1.0, 0.0           9, 9, 9
    no_history / context    WRONG          WRONG           0.0, 0.0, 1.0           0, 0, 0
    no_history / top3       WRONG          WRONG           0.0, 0.0, 0.0           0, 0, 0
    full_history / context  CORRECT        CORRECT         1.0, 1.0, 1.0           40, 40, 40

so bm25's context accuracy is 0.5 (the unparseable verdict is not correct) and the reference reader
full_history has the best accuracy (never bold). ``oracle`` is missing (with its reason), and so is the strategy
``mdr`` when the suite's retrieval run lists it as missing.
"""

from __future__ import annotations

from pipelines.evaluate.answers.run import AnswerRun
from pipelines.evaluate.answers.types import AnswerItem, AnswerRecord, Verdict

QUESTIONS = {"Q1": ("What flies?", "red kite", "single-session", False),
             "Q2": ("What sails and steeps?", "blue boat and green tea", "multi-session", False),
             "Q5": ("What is Ana's blood type?", "not mentioned", "uncategorised", True)}
LLM = {"CORRECT": 1.0, "WRONG": 0.0}
PLAN = {  # (reader, setting) -> ({query: locomo_llm label}, {query: token_f1}, {query: context tokens})
    ("bm25", "context"): ({"Q1": "CORRECT", "Q2": None}, {"Q1": 1.0, "Q2": 0.5, "Q5": 1.0},
                          {"Q1": 12, "Q2": 18, "Q5": 6}),
    ("bm25", "top3"): ({"Q1": "CORRECT", "Q2": "CORRECT"}, {"Q1": 1.0, "Q2": 1.0, "Q5": 0.0},
                       {"Q1": 9, "Q2": 9, "Q5": 9}),
    ("no_history", "context"): ({"Q1": "WRONG", "Q2": "WRONG"}, {"Q1": 0.0, "Q2": 0.0, "Q5": 1.0},
                                {"Q1": 0, "Q2": 0, "Q5": 0}),
    ("no_history", "top3"): ({"Q1": "WRONG", "Q2": "WRONG"}, {"Q1": 0.0, "Q2": 0.0, "Q5": 0.0},
                             {"Q1": 0, "Q2": 0, "Q5": 0}),
    ("full_history", "context"): ({"Q1": "CORRECT", "Q2": "CORRECT"}, {"Q1": 1.0, "Q2": 1.0, "Q5": 1.0},
                                  {"Q1": 40, "Q2": 40, "Q5": 40}),
}
READER_STATS = {"calls": 15, "hits": 5, "misses": 10, "prompt_tokens": 1234, "completion_tokens": 56,
                "cost_usd": None, "seconds": 2.5}
JUDGE_STATS = {"calls": 10, "hits": 0, "misses": 10, "prompt_tokens": 4321, "completion_tokens": 99,
               "cost_usd": 0.0123, "seconds": 1.25}
REFERENCE = {"judge": "gpt-4o-mini", "source": "G-Long (seed 003) Table 4",
             "rows": {"MemoryBank": {"accuracy@3": 0.4405}, "G-Long": {"accuracy@3": 0.5783}}}


def record(reader: str, setting: str, query: str, label: str | None, f1: float, tokens: int) -> AnswerRecord:
    question, reference, category, abstention = QUESTIONS[query]
    item = AnswerItem(suite="synthetic", reader=reader, setting=setting, episode_id="p1", query_id=query,
                      question=question, reference=reference, context=f"Ana: context of {reader} for {query}.",
                      context_tokens=tokens, category=category, abstention=abstention, question_date="2023-05-08")
    verdicts = {}
    if query in ("Q1", "Q2"):
        verdicts["locomo_llm"] = (Verdict("locomo_llm", None, parsed=False, raw="I cannot tell.", prompt_tokens=300,
                                          completion_tokens=4, latency_s=0.5)
                                  if label is None else
                                  Verdict("locomo_llm", LLM[label], label=label, raw=f'{{"label": "{label}"}}',
                                          prompt_tokens=300, completion_tokens=8, cached=label == "WRONG",
                                          latency_s=0.5))
    verdicts["token_f1"] = Verdict("token_f1", f1, label=f"{f1:.4f}")
    return AnswerRecord(item=item, answer=f"answer of {reader} to {query}", prompt_tokens=50 + tokens,
                        completion_tokens=5, latency_s=0.25, cached=reader == "no_history", verdicts=verdicts)


def answer_run(judge: str = "local:smollm2-135m-instruct", reference: dict | None = None) -> AnswerRun:
    records = [record(reader, setting, query, labels.get(query), f1s[query], tokens[query])
               for (reader, setting), (labels, f1s, tokens) in PLAN.items() for query in QUESTIONS]
    return AnswerRun(suite="synthetic", reader="local:smollm2-135m-instruct", judge=judge, records=records,
                     judges=("locomo_llm", "token_f1"), reader_prompt="default", accuracy_ks=(3,),
                     reference=dict(REFERENCE if reference is None else reference), reader_stats=dict(READER_STATS),
                     judge_stats=dict(JUDGE_STATS), missing={"oracle": "no evidence session before the question"},
                     questions=3, questions_total=5, not_answered={"evidence_not_earlier": 2})
