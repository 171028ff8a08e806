"""Reader prompts: official texts equal their golden copies, and each style renders an AnswerItem as the
official scripts do (the context, the question, its date, LoCoMo's category rules, LD-Agent's blocks)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.answers import judge_prompts, prompts
from pipelines.evaluate.answers.types import AnswerItem

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> str:
    """A golden copy's text: the file after its header line (repository, path, commit)."""
    header, text = (GOLDEN / name).read_text(encoding="utf-8").split("\n", 1)
    assert header.startswith("# ") and " @ " in header, f"{name}: the header must name repo, path and commit"
    return text


OFFICIAL = {   # golden copy -> our text
    "longmemeval_reader.txt": prompts.LONGMEMEVAL_READER,
    "longmemeval_reader_cot.txt": prompts.LONGMEMEVAL_READER_COT,
    "locomo_qa.txt": prompts.LOCOMO_QA,
    "locomo_qa_cat5.txt": prompts.LOCOMO_QA_CAT_5,
    "locomo_temporal_suffix.txt": prompts.LOCOMO_TEMPORAL_SUFFIX,
    "locomo_adversarial_choice.txt": prompts.LOCOMO_ADVERSARIAL_CHOICE,
    "realmem_reader.txt": prompts.REALMEM_READER,
    "longmemeval_judge_default.txt": judge_prompts.LONGMEMEVAL_JUDGE["default"],
    "longmemeval_judge_temporal.txt": judge_prompts.LONGMEMEVAL_JUDGE["temporal-reasoning"],
    "longmemeval_judge_knowledge_update.txt": judge_prompts.LONGMEMEVAL_JUDGE["knowledge-update"],
    "longmemeval_judge_preference.txt": judge_prompts.LONGMEMEVAL_JUDGE["single-session-preference"],
    "longmemeval_judge_abstention.txt": judge_prompts.LONGMEMEVAL_JUDGE["abstention"],
    "mem0_llm_judge.txt": judge_prompts.MEM0_ACCURACY_PROMPT,
    "realmem_qa_judge.txt": judge_prompts.REALMEM_QA_PROMPT,
    "realmem_memory_judge.txt": judge_prompts.REALMEM_MEMORY_PROMPT,
}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_official_prompt_equals_its_golden_copy(name):
    assert OFFICIAL[name] == golden(name)


def test_every_golden_copy_is_checked():
    used = set(OFFICIAL) | {"realmem_qa_judge_input.txt", "ld_agent_system.txt", "ld_agent_user.txt",
                            "geval_summeval_coherence.txt", "geval_summeval_fluency.txt"}
    assert {p.name for p in GOLDEN.glob("*.txt")} == used


def test_realmem_qa_input_is_the_official_f_string_after_the_prompt():
    assert "{QA_eval_prompt}" + judge_prompts.REALMEM_QA_INPUT == golden("realmem_qa_judge_input.txt")


def test_response_prompt_is_ld_agent_without_user_traits():
    user = golden("ld_agent_user.txt").replace("{self.", "{")
    start = user.index("<USER_TRAITS>")
    end = user.index("{user_traits}\n") + len("{user_traits}\n")
    assert prompts.RESPONSE_USER == user[:start] + user[end:]
    system = golden("ld_agent_system.txt").replace("{self.", "{")
    assert system == prompts.RESPONSE_SYSTEM + " Here are some of your distinctive personal traits: {agent_traits}.\n"


def item(**kw) -> AnswerItem:
    base = dict(suite="s", reader="bm25", setting="context", episode_id="e1", query_id="q1",
                question="Where did I park?", reference="Level 2", context="[2023-05-01] user: I parked on level 2.",
                context_tokens=9)
    return AnswerItem(**{**base, **kw})


def test_longmemeval_reader_puts_history_date_and_question():
    it = item(question_date="2023/05/30 (Tue) 23:40")
    (message,) = prompts.reader_messages("longmemeval", it)
    assert message["role"] == "user"
    assert message["content"] == golden("longmemeval_reader.txt").format(it.context, it.question_date, it.question)
    (cot,) = prompts.reader_messages("longmemeval_cot", replace(it, question_date=None))
    assert "Current Date: unknown\nQuestion: Where did I park?\nAnswer (step by step):" in cot["content"]


def test_question_date_uses_the_published_longmemeval_format():
    when = datetime(2023, 5, 30, 23, 40)
    assert prompts.question_date("longmemeval", when) == "2023/05/30 (Tue) 23:40"
    assert prompts.question_date("default", when) == "2023-05-30 23:40"
    assert prompts.question_date("longmemeval", None) is None


@pytest.mark.parametrize("category, ending", [
    ("4", "Question: Where did I park? Short answer:\n"),
    ("2", "Question: Where did I park? Use DATE of CONVERSATION to answer with an approximate date. Short answer:\n"),
])
def test_locomo_reader_follows_the_context_with_qa_prompt(category, ending):
    it = item(category=category)
    (message,) = prompts.reader_messages("locomo", it)
    assert message["role"] == "user"
    assert message["content"].startswith(it.context + "\n\n\nBased on the above context, write an answer in the form")
    assert message["content"].endswith(ending)


def test_locomo_category_5_gets_its_own_prompt():
    (message,) = prompts.reader_messages("locomo", item(category="5", abstention=True))
    assert message["content"] == item().context + "\n\n" + golden("locomo_qa_cat5.txt").format("Where did I park?")


def test_locomo_adversarial_choice_and_answer_mapping():
    it = item(category="5", question="What did Caroline realize?")
    question, key = prompts.adversarial_choice(it, "self-care is important")
    assert sorted(key.values()) == sorted([prompts.LOCOMO_NOT_MENTIONED, "self-care is important"])
    assert question == it.question + f" Select the correct answer: (a) {key['a']} (b) {key['b']}. "
    assert prompts.adversarial_choice(it, "self-care is important") == (question, key)   # deterministic
    orders = {prompts.adversarial_choice(replace(it, query_id=f"q{i}"), "x")[1]["a"] for i in range(20)}
    assert orders == {"x", prompts.LOCOMO_NOT_MENTIONED}                                  # both orders occur
    assert prompts.choice_answer(" A ", key) == key["a"]
    assert prompts.choice_answer("b", key) == key["b"]
    assert prompts.choice_answer("(b)", key) == key["b"]
    assert prompts.choice_answer("(a)", key) == key["a"]
    assert prompts.choice_answer("It is Not Mentioned", key) == "it is not mentioned"


def test_realmem_reader_numbers_each_context_line():
    it = item(context="[2023-05-01] User: budget is 500\n\n[2023-05-02] User: prefers trains\n")
    (message,) = prompts.reader_messages("realmem", it)
    memories = "---- idx 1 ----\n[2023-05-01] User: budget is 500\n\n---- idx 2 ----\n[2023-05-02] User: prefers trains"
    assert message["content"] == golden("realmem_reader.txt").format(evidence_text=memories, question=it.question)


def test_response_reader_splits_the_dialogue_and_fills_memory():
    it = item(question="User: I went hiking.\nAgent: Where?\nUser: Near the lake: it was cold.",
              context="User likes hiking")
    system, user = prompts.reader_messages("response", it)
    assert system == {"role": "system", "content": prompts.RESPONSE_SYSTEM.format(agent_name="Agent")}
    assert user["role"] == "user"
    assert user["content"].startswith("<CONTEXT>\nDrawing from your recent conversation with User:\n"
                                      "User: I went hiking.\nAgent: Where?\n<MEMORY>\n"
                                      "The memories linked to the ongoing conversation are:\nUser likes hiking\n")
    assert "User just said: Near the lake: it was cold.\n" in user["content"]
    assert "USER_TRAITS" not in user["content"]


def test_default_reader_and_unknown_style():
    system, user = prompts.reader_messages("default", item(question_date="2023-05-30 23:40"))
    assert system["role"] == "system"
    assert user["content"].endswith("Date: 2023-05-30 23:40\nQuestion: Where did I park?\nAnswer:")
    with pytest.raises(ConfigError, match="q1"):
        prompts.reader_messages("nope", item())
    assert set(prompts.READER_STYLES) == {"longmemeval", "longmemeval_cot", "locomo", "realmem", "response", "default"}


def test_finish_answer_strips_and_drops_the_response_label():
    assert prompts.finish_answer("locomo", item(), "  Level 2 \n") == "Level 2"
    assert prompts.finish_answer("response", item(), "RESPONSE: Sounds fun!") == "Sounds fun!"
    assert prompts.finish_answer("default", item(), "RESPONSE: x") == "RESPONSE: x"
