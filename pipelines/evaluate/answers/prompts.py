"""Reader prompts: the conversation a reader model is asked for one :class:`AnswerItem`, per benchmark.

``reader_messages(style, item)`` renders the benchmark's own answer prompt around ``item.context`` (the
memory text the reader sees: one retrieved item per line, as ``pipelines.memory.base.pack_context``
renders them) and ``item.question``; ``finish_answer(style, item, text)`` turns the model's completion into
the answer that is judged (the official scripts strip it). Prompt texts are the official ones, verbatim
(tests/evaluate/answers/golden/ holds a copy of each with the repository, path and commit it came from):

- ``longmemeval``: xiaowu0162/LongMemEval src/generation/run_generation.py, ``prepare_prompt`` in the
  retrieval setting without fact expansion or chain of thought: "History Chats" (our context), "Current
  Date" (``item.question_date``, the published ``question_date``, e.g. "2023/05/30 (Tue) 23:40"; "unknown"
  when the item has none) and the question, as one user message. The official script sends it with
  temperature 0 and up to 500 new tokens and truncates the history to the model's window (our readers fit
  the context to the window instead). ``longmemeval_cot``: the same with its "Answer the question step by
  step" variant (800 new tokens officially).
- ``locomo``: snap-research/locomo task_eval/evaluate_gpts.py, the retrieval (``--use-rag``) form: the
  context, a blank line, then ``QA_PROMPT`` ("... write an answer in the form of a short phrase ...") with
  the question, as one user message (its GPT-4 path; 32 new tokens, temperature 0). Category 2 (temporal)
  questions get the official suffix " Use DATE of CONVERSATION to answer with an approximate date.".
  Category 5 (adversarial) questions get ``QA_PROMPT_CAT_5``. The official script also appends a two-way
  choice, " Select the correct answer: (a) {} (b) {}. ", between "Not mentioned in the conversation" and
  the question's ``adversarial_answer`` in random order, and maps a one-letter reply back to the option
  (``get_cat_5_answer``). The canonical Query does not keep ``adversarial_answer`` (the loader drops it),
  so an AnswerItem cannot carry the trap option: category 5 questions are asked without the choice (the
  adversarial check of LoCoMo's evaluation, "not mentioned" / "no information available" in the answer,
  reads a free answer as well). :func:`adversarial_choice` and :func:`choice_answer` implement the
  official choice (the order fixed by the query id instead of ``random.random()``) for when it does.
- ``realmem``: zhiyuan5986/RealMemBench eval/run_generation.py, ``construct_answer_prompt``: the memories
  numbered "---- idx i ----" as ``construct_evidence_text`` numbers retrieved chunks (one per context
  line), then "Query:" and "Response:", as one user message (the official call samples at temperature 0.7).
- ``response``: G-Long's response generation (seed 003, Appendix K, a figure only): LD-Agent's prompt
  (leolee99/LD-Agent Module/Generator.py, ``select_prompts``) without its USER_TRAITS block, the retrieved
  memory in its MEMORY block; a system and a user message, speakers named as LD-Agent's defaults ("User",
  "Agent"). LD-Agent's sentence on the agent's persona traits is left out of the system message too: no
  strategy here extracts personas (G-Long has none). ``item.question`` holds the dialogue so far, one turn
  per line ("speaker: text"): the lines before the last fill CONTEXT and the last line is what the user
  "just said" (its "speaker: " prefix removed); ``item.reference`` is the gold response.
- ``default``: a short neutral question-answering prompt of ours (the synthetic suite), not a paper's.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from pipelines.errors import ConfigError
from pipelines.evaluate.answers.lexical import CATEGORY_ADVERSARIAL, CATEGORY_TEMPORAL
from pipelines.evaluate.answers.types import AnswerItem
from pipelines.llm.base import Messages

READER_STYLES = ("longmemeval", "longmemeval_cot", "locomo", "realmem", "response", "default")

# --- LongMemEval (src/generation/run_generation.py, prepare_prompt) ------------------------------------
LONGMEMEVAL_READER = (
    "I will give you several history chats between you and a user. Please answer the question based on the "
    "relevant chat history.\n\n\nHistory Chats:\n\n{}\n\nCurrent Date: {}\nQuestion: {}\nAnswer:")
LONGMEMEVAL_READER_COT = (
    "I will give you several history chats between you and a user. Please answer the question based on the "
    "relevant chat history. Answer the question step by step: first extract all the relevant information, "
    "and then reason over the information to get the answer.\n\n\nHistory Chats:\n\n{}\n\nCurrent Date: {}\n"
    "Question: {}\nAnswer (step by step):")
LONGMEMEVAL_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"   # the published question_date / haystack_dates format

# --- LoCoMo (task_eval/evaluate_gpts.py) -----------------------------------------------------------------
LOCOMO_QA = """
Based on the above context, write an answer in the form of a short phrase for the following question. \
Answer with exact words from the context whenever possible.

Question: {} Short answer:
"""
LOCOMO_QA_CAT_5 = """
Based on the above context, answer the following question.

Question: {} Short answer:
"""
LOCOMO_TEMPORAL_SUFFIX = " Use DATE of CONVERSATION to answer with an approximate date."
LOCOMO_ADVERSARIAL_CHOICE = " Select the correct answer: (a) {} (b) {}. "
LOCOMO_NOT_MENTIONED = "Not mentioned in the conversation"

# --- RealMem (eval/run_generation.py, construct_answer_prompt) -------------------------------------------
REALMEM_READER = (
    "You are a personal AI assistant that helps the user with some long-term tasks. Please respond to the "
    "user\u2019s latest message based on the reference memory.\n\nMemories:\n{evidence_text}\n\n"
    "Query: {question}\n\nResponse:")

# --- G-Long's response generation: LD-Agent (Module/Generator.py, select_prompts) without USER_TRAITS ----
RESPONSE_USER_NAME, RESPONSE_AGENT_NAME = "User", "Agent"   # LD-Agent's --usr_name / --agent_name defaults
RESPONSE_SYSTEM = ("As a communication expert with outstanding communication habits, you embody the role of "
                   "{agent_name} throughout the following dialogues.")
RESPONSE_USER = (
    "<CONTEXT>\nDrawing from your recent conversation with {usr_name}:\n{context}\n"
    "<MEMORY>\nThe memories linked to the ongoing conversation are:\n{memories}\n"
    "\nNow, please role-play as {agent_name} to continue the dialogue between {agent_name} and {usr_name}.\n"
    "{usr_name} just said: {inquiry}\n"
    "Please respond to {usr_name}'s statement using the following format (maximum 30 words, must be in "
    "English):\nRESPONSE:\n")

# --- ours (the synthetic suite) --------------------------------------------------------------------------
DEFAULT_SYSTEM = ("Answer the question about the user's past conversations from the memory below. Answer in a "
                  "few words. If the memory does not say, answer that it is not mentioned.")
DEFAULT_USER = "Memory:\n{context}\n\n{date}Question: {question}\nAnswer:"

_SPEAKER_PREFIX = re.compile(r"^[^:\n]{1,40}: ")


def question_date(style: str, timestamp: datetime | None) -> str | None:
    """A query's date as the benchmark's reader prompt shows it (LongMemEval: its published format)."""
    if timestamp is None:
        return None
    if style.startswith("longmemeval"):
        return timestamp.strftime(LONGMEMEVAL_DATE_FORMAT)
    return timestamp.isoformat(sep=" ", timespec="minutes")


def context_lines(context: str) -> list[str]:
    """The retrieved items of a context, one per non-blank line."""
    return [line for line in context.splitlines() if line.strip()]


def numbered_memories(context: str) -> str:
    """RealMem's ``construct_evidence_text``: each retrieved item as "---- idx i ----" and its text."""
    return "\n\n".join(f"---- idx {i} ----\n{line.strip()}" for i, line in enumerate(context_lines(context), 1))


def adversarial_choice(item: AnswerItem, trap_answer: str) -> tuple[str, dict[str, str]]:
    """LoCoMo's category 5 question with the official two-way choice, and its answer key {"a": ..., "b": ...}.

    The official script orders the options with ``random.random() < 0.5``; here the order is fixed by the
    query id (the same item always gets the same prompt, which the response cache needs)."""
    not_mentioned_first = hashlib.sha256(item.query_id.encode()).digest()[0] % 2 == 0
    a, b = (LOCOMO_NOT_MENTIONED, trap_answer) if not_mentioned_first else (trap_answer, LOCOMO_NOT_MENTIONED)
    return item.question + LOCOMO_ADVERSARIAL_CHOICE.format(a, b), {"a": a, "b": b}


def choice_answer(text: str, answer_key: dict[str, str]) -> str:
    """LoCoMo's ``get_cat_5_answer``: a reply of one character (any containing "a" picks option a, else b) or
    of three ("(a)" picks a, else b) becomes the option's text; a longer reply is kept, stripped and lower-cased."""
    reply = text.strip().lower()
    if len(reply) == 1:
        return answer_key["a"] if "a" in reply else answer_key["b"]
    if len(reply) == 3:
        return answer_key["a"] if "(a)" in reply else answer_key["b"]
    return reply


def _locomo_question(item: AnswerItem) -> str:
    if item.category == CATEGORY_TEMPORAL:
        return item.question + LOCOMO_TEMPORAL_SUFFIX
    return item.question


def _dialogue_turn(question: str) -> tuple[str, str]:
    """(the dialogue before the last line, the last line without its "speaker: " prefix)."""
    lines = question.rstrip("\n").split("\n")
    return "\n".join(lines[:-1]), _SPEAKER_PREFIX.sub("", lines[-1], count=1)


def reader_messages(style: str, item: AnswerItem) -> Messages:
    """The conversation that asks the reader ``item``'s question from ``item.context`` in ``style``."""
    if style in ("longmemeval", "longmemeval_cot"):
        template = LONGMEMEVAL_READER if style == "longmemeval" else LONGMEMEVAL_READER_COT
        date = item.question_date if item.question_date else "unknown"
        return [{"role": "user", "content": template.format(item.context, date, item.question)}]
    if style == "locomo":
        template = LOCOMO_QA_CAT_5 if item.category == CATEGORY_ADVERSARIAL else LOCOMO_QA
        return [{"role": "user", "content": item.context + "\n\n" + template.format(_locomo_question(item))}]
    if style == "realmem":
        content = REALMEM_READER.format(evidence_text=numbered_memories(item.context), question=item.question)
        return [{"role": "user", "content": content}]
    if style == "response":
        context, inquiry = _dialogue_turn(item.question)
        names = {"usr_name": RESPONSE_USER_NAME, "agent_name": RESPONSE_AGENT_NAME}
        return [{"role": "system", "content": RESPONSE_SYSTEM.format(**names)},
                {"role": "user", "content": RESPONSE_USER.format(context=context, memories=item.context,
                                                                 inquiry=inquiry, **names)}]
    if style == "default":
        date = f"Date: {item.question_date}\n" if item.question_date else ""
        return [{"role": "system", "content": DEFAULT_SYSTEM},
                {"role": "user", "content": DEFAULT_USER.format(context=item.context or "(empty)", date=date,
                                                                question=item.question)}]
    raise ConfigError(f"reader prompt style must be one of {', '.join(READER_STYLES)}, got {style!r} "
                      f"(suite {item.suite}, query {item.query_id}).")


def finish_answer(style: str, item: AnswerItem, text: str) -> str:
    """The answer that is judged, from the reader's completion: stripped, as every official script does;
    the ``response`` style also drops a leading "RESPONSE:" (LD-Agent's answer format)."""
    answer = text.strip()
    if style == "response" and answer.upper().startswith("RESPONSE:"):
        answer = answer[len("RESPONSE:"):].strip()
    return answer
