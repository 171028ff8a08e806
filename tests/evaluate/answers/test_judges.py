"""Judges: prompts per item, parsing of canned outputs (unparseable never correct), summaries, and run_judges
with a fake LLM (one batched generate call per LLM judge, identical requests sent once)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.answers import judge_prompts as T
from pipelines.evaluate.answers import judges as J
from pipelines.evaluate.answers.types import AnswerItem, AnswerRecord, Verdict
from pipelines.llm.base import LLM, Completion, GenerationSettings, Messages

GOLDEN = Path(__file__).parent / "golden"


def item(**kw) -> AnswerItem:
    base = dict(suite="s", reader="bm25", setting="context", episode_id="e1", query_id="q1",
                question="How many days did the trip last?", reference="18 days",
                context="[2023-05-01] user: the trip took 18 days", context_tokens=9, category="temporal-reasoning")
    return AnswerItem(**{**base, **kw})


def judge(name: str) -> J.Judge:
    (only,) = J.make_judges([name])
    return only


def prompt_of(j: J.Judge, it: AnswerItem, answer: str = "19 days") -> str:
    (message,) = j.messages(it, answer)
    assert message["role"] == "user"
    return message["content"]


# --- LongMemEval --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("category, abstention, template", [
    ("single-session-user", False, "default"), ("single-session-assistant", False, "default"),
    ("multi-session", False, "default"), ("temporal-reasoning", False, "temporal-reasoning"),
    ("knowledge-update", False, "knowledge-update"), ("single-session-preference", False, "single-session-preference"),
    ("temporal-reasoning", True, "abstention"),       # an _abs question: the abstention prompt, whatever its type
])
def test_longmemeval_prompt_per_question_type(category, abstention, template):
    it = item(category=category, abstention=abstention)
    expected = T.LONGMEMEVAL_JUDGE[template].format(it.question, it.reference, "19 days")
    assert prompt_of(judge("longmemeval"), it) == expected


def test_longmemeval_unknown_type_names_the_query():
    with pytest.raises(ConfigError, match="q1.*'single-session'"):
        judge("longmemeval").messages(item(category="single-session"), "x")


@pytest.mark.parametrize("category, abstention, template", [
    ("location", False, "default"), ("uncategorised", False, "default"), ("location", True, "abstention")])
def test_answer_check_is_longmemeval_default_prompt_for_any_category(category, abstention, template):
    it = item(category=category, abstention=abstention)
    expected = T.LONGMEMEVAL_JUDGE[template].format(it.question, it.reference, "19 days")
    assert prompt_of(judge("answer_check"), it) == expected
    assert judge("answer_check").parse(it, "19 days", "No.").score == 0.0
    assert not judge("answer_check").parse(it, "19 days", "maybe").parsed


@pytest.mark.parametrize("output, score, parsed", [
    ("Yes", 1.0, True), ("yes.", 1.0, True), ("YES, it is correct", 1.0, True),
    ("No", 0.0, True), ("no.", 0.0, True),
    ("My eyes say so", 1.0, True),            # the official 'yes' in output.lower() quirk
    ("Incorrect", None, False), ("", None, False), ("I cannot tell", None, False),
])
def test_longmemeval_parse(output, score, parsed):
    verdict = judge("longmemeval").parse(item(), "19 days", output)
    assert (verdict.score, verdict.parsed, verdict.raw) == (score, parsed, output)


# --- mem0 (LoCoMo LLM judge) --------------------------------------------------------------------------------

@pytest.mark.parametrize("output, score, parsed", [
    ('{"label": "CORRECT"}', 1.0, True),
    ('```json\n{"label": "WRONG"}\n```', 0.0, True),
    ('It names the same place. {"label": "CORRECT"}', 1.0, True),        # JSON after an explanation
    ('{"reasoning": "close", "label": "WRONG"} trailing words', 0.0, True),
    ('{"label": "correct"}', None, False),                               # not the official label
    ("CORRECT", None, False),                                            # no JSON at all
    ('{"label": CORRECT}', None, False),
])
def test_mem0_parse(output, score, parsed):
    verdict = judge("locomo_llm").parse(item(), "x", output)
    assert (verdict.score, verdict.parsed) == (score, parsed)


def test_mem0_prompt_and_abstention_skipped():
    j = judge("locomo_llm")
    it = item(question="Where?", reference="Paris")
    assert prompt_of(j, it, "in Paris") == T.MEM0_ACCURACY_PROMPT.format(
        question="Where?", gold_answer="Paris", generated_answer="in Paris")
    assert j.applies(it) and not j.applies(replace(it, category="5", abstention=True))


# --- RealMem ------------------------------------------------------------------------------------------------

def test_realmem_qa_prompt_reads_evidence_and_reference():
    j = judge("realmem_qa")
    it = item(question=" Plan my week \n", reference=" Keep Friday free ", evidence=("likes trains", "", "budget 500"))
    assert prompt_of(j, it, "ok") == T.REALMEM_QA_PROMPT + (
        "\n\n### Input Data\n1. Query: Plan my week\n2. User-related Memory: likes trains\nbudget 500\n"
        "3. Reference Answer: Keep Friday free\n4. Candidate Answer: ok\n")
    assert "2. User-related Memory: No specific memory annotation found.\n" in prompt_of(j, replace(it, evidence=()))


@pytest.mark.parametrize("output, score", [
    ('```json\n{"score": 2, "reason": "uses the budget"}\n```', 2.0),
    ('Here it is: {"score": 3, "reason": "all"} done', 3.0),
    ('{"score": 0, "reason": "conflicts"}', 0.0),
    ('{"score": 7, "reason": "?"}', None),          # out of the 0-3 scale
    ('{"score": -1}', None),
    ('{"score": true}', None),
    ('{"score": "2"}', None),
    ('{"reason": "no score"}', None),
    ("Score: 2", None),
    ('{"score": 2, # comment\n}', None),            # invalid JSON, as the official parser finds it
])
def test_realmem_qa_parse(output, score):
    verdict = judge("realmem_qa").parse(item(), "x", output)
    assert verdict.score == score and verdict.parsed == (score is not None)


def test_realmem_memory_one_output_two_figures():
    recall, helpful = J.make_judges(["realmem_memory"])
    assert (recall.name, helpful.name) == ("realmem_memory_recall", "realmem_memory_helpful")
    it = item(evidence=("likes trains", "budget 500"), context="a\nb")
    assert recall.messages(it, "x") == helpful.messages(it, "x")
    assert prompt_of(recall, it) == T.REALMEM_MEMORY_PROMPT.format(
        question=it.question, groundtruth_memory="likes trains\nbudget 500",
        retrieved_memory="---- idx 1 ----\na\n\n---- idx 2 ----\nb")
    output = '```json\n{"Mem_recall": 0.5, "Mem_helpful_score": 1, "Mem_hits": ["likes trains"]}\n```'
    assert recall.parse(it, "x", output).score == 0.5
    assert helpful.parse(it, "x", output).score == 1.0
    assert not recall.parse(it, "x", '{"Mem_recall": 1.5, "Mem_helpful_score": 3}').parsed
    assert not helpful.parse(it, "x", '{"Mem_recall": 1.5, "Mem_helpful_score": 3}').parsed
    assert not recall.applies(replace(it, evidence=()))          # the official code skips it
    assert not recall.applies(replace(it, context="  \n"))


# --- G-Eval -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("output, score", [
    ("4", 4.0), (" 5", 5.0), ("3.5", 3.5), ("1\n- Reason", 1.0),
    ("Score: 4", None),             # G-Eval's parse_output reads a number at the start only
    ("9", None), ("0", None),       # outside G-Long's 1-5 scale
    (".", None), ("", None),
])
def test_geval_parse(output, score):
    for j in J.make_judges(["geval"]):
        verdict = j.parse(item(), "x", output)
        assert verdict.score == score and verdict.parsed == (score is not None)


def test_geval_prompts_keep_the_official_form():
    official = (GOLDEN / "geval_summeval_coherence.txt").read_text(encoding="utf-8").split("\n", 1)[1]
    fluency = (GOLDEN / "geval_summeval_fluency.txt").read_text(encoding="utf-8").split("\n", 1)[1]
    names = [j.name for j in J.make_judges(["geval"])]
    assert names == ["geval_coherence", "geval_engagingness", "geval_fluency"]
    for j in J.make_judges(["geval"]):
        text = prompt_of(j, item(question="User: I adopted a cat.", category="response"), "What is its name?")
        for line in ("Please make sure you read and understand these instructions carefully. Please keep this "
                     "document open while reviewing, and refer to it as needed.", "Evaluation Criteria:",
                     "Evaluation Steps:", "Example:", "Evaluation Form (scores ONLY):"):
            assert line in official.split("\n") and line in text.split("\n")
        assert "Conversation History:\n\nUser: I adopted a cat.\n\nResponse:\n\nWhat is its name?\n" in text
    # step 3 of coherence is G-Eval's; fluency is G-Eval's definition for a response on the 1-5 scale
    assert official.split("\n")[16] in T.GEVAL_CRITERIA["coherence"][1]
    official_fluency = fluency.split("Evaluation Criteria:\n\n")[1].split("\n\n\nExample:")[0]
    adapted = (official_fluency.replace("summary", "response").replace("(1-3)", "(1-5)")
               .replace("- 3: Good", "- 5: Good").replace("- 2: Fair", "- 3: Fair"))
    assert T.GEVAL_CRITERIA["fluency"][0] == adapted


# --- model-free -------------------------------------------------------------------------------------------

def test_locomo_f1_per_category_and_unknown_category():
    j = judge("locomo_f1")
    assert not j.needs_llm
    assert j.score(item(category="3", reference="Psychology; counseling"), "psychology").score == 1.0
    assert j.score(item(category="5", abstention=True), "Not mentioned in the conversation").score == 1.0
    with pytest.raises(ConfigError, match="q1.*'temporal-reasoning'"):
        j.score(item(), "x")


def test_token_f1_and_exact_score_abstention_by_the_adversarial_rule():
    f1, exact = judge("token_f1"), judge("exact")
    assert f1.score(item(reference="18 days"), "It lasted 18 days").score == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert exact.score(item(reference="18 days"), "18 days.").score == 1.0
    assert exact.score(item(reference="18 days"), "18").score == 0.0
    for j in (f1, exact):
        assert j.score(item(abstention=True), "That is not mentioned.").score == 1.0
        assert j.score(item(abstention=True), "18 days").score == 0.0


# --- summaries ----------------------------------------------------------------------------------------------

def v(score, parsed=True):
    return Verdict(judge="j", score=score, parsed=parsed)


def test_accuracy_counts_unparseable_as_not_correct():
    summary = judge("longmemeval").summary([v(1.0), v(0.0), v(None, False), v(1.0)])
    assert summary == {"accuracy": 0.5, "n": 4, "unparseable": 1, "unparseable_share": 0.25}
    assert list(summary)[0] == judge("longmemeval").metric


def test_graded_score_is_the_mean_of_parsed_scores():
    summary = judge("realmem_qa").summary([v(3.0), v(0.0), v(3.0), v(2.0), v(None, False)])
    assert summary == {"score": 2.0, "n": 5, "unparseable": 1, "unparseable_share": 0.2,
                       "hallucination_rate": 0.25, "perfect_rate": 0.5}
    assert judge("locomo_f1").summary([v(0.5), v(1.0)]) == {"f1": 0.75, "n": 2, "unparseable": 0,
                                                            "unparseable_share": 0.0}


def test_empty_and_all_unparseable_summaries_have_no_headline():
    assert judge("longmemeval").summary([]) == {"n": 0, "unparseable": 0, "unparseable_share": 0.0}
    (coherence, *_) = J.make_judges(["geval"])
    assert coherence.summary([v(None, False)]) == {"n": 1, "unparseable": 1, "unparseable_share": 1.0}


def test_registry_names():
    assert set(J.JUDGES) == {"longmemeval", "answer_check", "locomo_f1", "locomo_llm", "realmem_qa", "realmem_memory", "geval",
                             "token_f1", "exact"}
    assert [j.name for j in J.make_judges(["locomo_f1", "geval", "locomo_f1"])] == [
        "locomo_f1", "geval_coherence", "geval_engagingness", "geval_fluency"]
    with pytest.raises(ConfigError, match="'nope'.*known: longmemeval"):
        J.make_judges(["nope"])


# --- run_judges with a fake LLM -----------------------------------------------------------------------------

class FakeLLM(LLM):
    """Answers each conversation with ``reply(messages)``; records every generate call."""

    backend = "fake"

    def __init__(self, reply: Callable[[Messages], str]):
        self.reply, self.calls = reply, []

    @property
    def model(self) -> str:
        return "canned"

    def identity(self) -> dict[str, Any]:
        return {"backend": "fake"}

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None) -> list[Completion]:
        self.calls.append((list(batch), settings))
        out = [Completion(text=self.reply(m), prompt_tokens=11, completion_tokens=2) for m in batch]
        if progress:
            progress(len(out))
        return out


def canned(messages: Messages) -> str:
    text = messages[-1]["content"]
    if "Is the model response correct?" in text:
        return "yes" if "Model Response: 18 days" in text else "The response is off."
    if "Mem_recall" in text:
        return '{"Mem_recall": 1.0, "Mem_helpful_score": 2}'
    return "garbage"


def records() -> list[AnswerRecord]:
    base = item(evidence=("the trip took 18 days",))
    return [AnswerRecord(base, "18 days"),
            AnswerRecord(replace(base, reader="dense"), "18 days"),        # same judge request as the first
            AnswerRecord(replace(base, query_id="q2", question="How long was the trip?"), "I don't know"),
            AnswerRecord(replace(base, query_id="q3", evidence=()), "18 days")]   # no memory verdicts


def test_run_judges_batches_each_llm_judge_once():
    llm, recs, ticks = FakeLLM(canned), records(), []
    chosen = J.make_judges(["longmemeval", "realmem_memory", "token_f1"])
    J.run_judges(chosen, recs, llm, progress=ticks.append)

    # one call for longmemeval (2 distinct requests of 4: the dense twin and q3 ask what q1 asks), one for both
    # realmem_memory judges (q1 once: bm25 and dense are identical; q2), none for token_f1
    assert len(llm.calls) == 2
    assert len(llm.calls[0][0]) == 2 and llm.calls[0][1] == J.LongMemEvalJudge.settings
    assert len(llm.calls[1][0]) == 2
    assert sum(ticks) == J.count_judgements(chosen, recs) == 4 + 3 + 3 + 4

    first, twin, unsure, bare = recs
    assert first.verdicts["longmemeval"].score == 1.0 and not first.verdicts["longmemeval"].cached
    assert twin.verdicts["longmemeval"].score == 1.0 and twin.verdicts["longmemeval"].cached
    assert first.verdicts["longmemeval"].prompt_tokens == 11
    assert unsure.verdicts["longmemeval"] == Verdict(judge="longmemeval", score=None, parsed=False,
                                                      raw="The response is off.", prompt_tokens=11,
                                                      completion_tokens=2)
    assert first.verdicts["realmem_memory_recall"].score == 1.0
    assert first.verdicts["realmem_memory_helpful"].score == 2.0
    assert "realmem_memory_recall" not in bare.verdicts and bare.verdicts["longmemeval"].cached
    assert first.verdicts["token_f1"].score == 1.0
    accuracy = J.make_judges(["longmemeval"])[0].summary([r.verdicts["longmemeval"] for r in recs])
    assert accuracy["accuracy"] == 0.75 and accuracy["unparseable"] == 1


def test_run_judges_without_llm():
    recs = records()
    J.run_judges(J.make_judges(["token_f1", "exact"]), recs)          # model-free: no LLM needed
    assert recs[2].verdicts["exact"].score == 0.0
    with pytest.raises(ConfigError, match="geval_coherence needs a language model"):
        J.run_judges(J.make_judges(["geval"]), recs)


def test_run_judges_garbage_is_never_correct():
    recs = records()
    J.run_judges(J.make_judges(["locomo_llm", "realmem_qa", "geval"]), recs, FakeLLM(lambda m: "garbage"))
    verdicts = [v for r in recs for v in r.verdicts.values()]
    assert len(verdicts) == 4 * 5 and all(not v.parsed and v.score is None for v in verdicts)
    assert judge("locomo_llm").summary([r.verdicts["locomo_llm"] for r in recs])["accuracy"] == 0.0
