"""The questions a suite's readers answer, what the temporal protocol records for them, the reference readers.

Questions (:func:`select_questions`), the same for every reader (a paired comparison):

- task ``qa``: every query of the episodes that a memory can answer (:func:`pipelines.evaluate.protocol.answerable`:
  not one whose evidence lies in the session it is asked in or a later one; those are counted as
  ``evidence_not_earlier``). Abstention queries are answered too: the judges expect a refusal. With
  ``max_questions`` set, an evenly spaced subset of that many, in data order (every part of the data and, on
  LongMemEval, every question type stays represented; the same subset on every run);
- task ``response`` (MSC, CC: dialogue without questions): the (Q, R) rounds of the episodes, as MDR's examples
  select them (:func:`pipelines.data.tasks.build_mdr_examples`: a main-speaker turn R answering the partner's
  turn Q), from the second session on (before it a memory holds nothing; G-Long reports sessions 2-5), evenly
  spaced, at most ``max_questions`` (else the suite's ``max_generation_examples``). The reader writes R from the
  dialogue of its session so far (``AnswerItem.question``) and the memory; the strategies retrieve with Q.

:func:`answer_request` turns the questions into the protocol's :class:`~pipelines.evaluate.protocol.AnswerRequest`,
so the strategies' contexts are recorded at each question's time while the retrieval is scored.

Reference readers (LongMemEval's, beside the strategies), built from the dialogue as published (every turn, also
where a suite's corpus indexes the main speaker's turns only), never from a session at or after the question's:

- ``full_history``: the turns before the question's session, newest first, as many as fit the reader model's
  window less the prompt and the answer (its own tokenizer, :meth:`LLM.count_tokens`; ``full_history_tokens``
  caps it, and stands for the window of a server that does not say it), written in time order;
- ``oracle``: the turns of the question's evidence sessions only (LongMemEval's oracle setting), fitted alike.

Both are rendered as the strategies' contexts are (``[YYYY-MM-DD] speaker: text`` lines, in time order:
:func:`pipelines.memory.base.pack_context`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from pipelines.data.sampling import evenly_spaced
from pipelines.data.schema import Episode, Query
from pipelines.evaluate.answers.types import AnswerItem
from pipelines.evaluate.protocol import AnswerRequest, answerable
from pipelines.evaluate.suite import Suite
from pipelines.llm.base import LLM
from pipelines.memory import Retrieved, TokenCounter, pack_context

RESPONSE_ID = ":response"        # the probe of a response round: "<response turn id>:response"


@dataclass(frozen=True)
class Question:
    """One question every reader of a suite answers."""

    episode_id: str
    query: Query                 # qa: the data's query; response: a probe (its question: the partner's turn Q)
    question: str                # what the reader is asked (qa: the question; response: the dialogue so far)
    reference: str               # the gold answer or response
    session_index: int           # Session.index of the session it is asked in (last + 1: after the last)
    position: int                # position of that session in time order (len(sessions): after the last)


@dataclass
class Questions:
    """The questions of a suite, and how many the data holds."""

    items: list[Question]
    total: int                            # answerable questions before the cap
    not_answered: dict[str, int]          # reason -> questions left out (evidence_not_earlier; response: first_session)


def select_questions(suite: Suite, episodes: Sequence[Episode], max_questions: int | None = None) -> Questions:
    """The questions of ``suite`` on ``episodes`` (see the module docstring); none when it has no ``answers``."""
    if suite.answers is None:
        return Questions([], 0, {})
    if suite.answers.task == "response":
        return _response_rounds(suite, episodes, max_questions)
    found: list[Question] = []
    left_out: dict[str, int] = {}
    for episode in episodes:
        sessions = sorted(episode.sessions, key=lambda s: s.index)
        position = {s.id: p for p, s in enumerate(sessions)}
        after_last = (sessions[-1].index + 1) if sessions else 0
        for query, reason in answerable(episode):
            if reason is not None:
                left_out[reason] = left_out.get(reason, 0) + 1
                continue
            pos = position[query.session_id] if query.session_id is not None else len(sessions)
            index = sessions[pos].index if pos < len(sessions) else after_last
            found.append(Question(episode.id, query, query.question, query.answer, index, pos))
    return Questions(evenly_spaced(found, max_questions), len(found), left_out)


def _response_rounds(suite: Suite, episodes: Sequence[Episode], max_questions: int | None) -> Questions:
    from pipelines.data.tasks import build_mdr_examples

    by_id = {e.id: e for e in episodes}
    found: list[Question] = []
    first_session = 0
    for example in build_mdr_examples(episodes, max_history_rounds=0, source=f"suite {suite.name}"):
        episode = by_id[example.episode_id]
        sessions = sorted(episode.sessions, key=lambda s: s.index)
        pos = next(p for p, s in enumerate(sessions) if s.id == example.session_id)
        if pos == 0:  # nothing in memory yet
            first_session += 1
            continue
        session = sessions[pos]
        turn_at = next(i for i, t in enumerate(session.turns) if t.id == example.turn_id)
        dialogue = "\n".join(f"{t.speaker}: {' '.join(t.text.split())}" for t in session.turns[:turn_at])
        probe = Query(id=f"{example.turn_id}{RESPONSE_ID}", session_id=session.id, question=example.query,
                      answer=example.response, category=f"session {pos + 1}")
        found.append(Question(episode.id, probe, dialogue, example.response, session.index, pos))
    limit = max_questions if max_questions is not None else suite.max_generation_examples
    return Questions(evenly_spaced(found, limit), len(found), {"first_session": first_session} if first_session else {})


def answer_request(suite: Suite, questions: Questions) -> AnswerRequest | None:
    """What the protocol must record for ``questions`` (None when the suite answers nothing)."""
    if suite.answers is None or not questions.items:
        return None
    probes: dict[str, list[Query]] = {}
    if suite.answers.task == "response":  # the rounds are not queries of the data: asked for their context only
        for q in questions.items:
            probes.setdefault(q.episode_id, []).append(q.query)
    return AnswerRequest(frozenset((q.episode_id, q.query.id) for q in questions.items), suite.answers.accuracy_ks,
                         {e: tuple(p) for e, p in probes.items()})


def evidence_texts(episode: Episode, query: Query) -> tuple[str, ...]:
    """The texts of the memories the query used (RealMem's memory points), in their order."""
    texts = {m.id: m.text for m in episode.memories()}
    return tuple(texts[m] for m in query.evidence_memories if m in texts)


def base_item(suite: Suite, episode: Episode, question: Question, reader: str, setting: str, context: str,
              context_tokens: int) -> AnswerItem:
    """The :class:`AnswerItem` of ``question`` for one reader and setting (the question's date as the suite's
    reader prompt writes it: LongMemEval's published format, e.g. ``2023/05/30 (Tue) 23:40``)."""
    from pipelines.evaluate.answers.prompts import question_date

    query = question.query
    return AnswerItem(suite=suite.name, reader=reader, setting=setting, episode_id=episode.id, query_id=query.id,
                      question=question.question, reference=question.reference, context=context,
                      context_tokens=context_tokens, category=query.category or "uncategorised",
                      question_date=question_date(suite.answers.reader_prompt, query.timestamp),
                      abstention=query.abstention,
                      session_index=question.session_index, evidence=evidence_texts(episode, query))


class ModelTokens:
    """:class:`TokenCounter`'s ``count`` over a reader model's own tokenizer (what fills its window)."""

    def __init__(self, llm: LLM):
        self.llm = llm
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if not text:
            return 0
        if text not in self._cache:
            self._cache[text] = self.llm.count_tokens(text)
        return self._cache[text]


def window_budget(llm: LLM, style: str, item: AnswerItem, max_new_tokens: int, cap: int | None = None
                  ) -> int | None:
    """Tokens of history that fit the reader's window beside the prompt of ``item`` (its context empty, counted
    as the model reads it: :meth:`LLM.count_prompt_tokens`) and ``max_new_tokens`` of answer; ``cap``
    (``full_history_tokens``) bounds it. None: no limit known."""
    from pipelines.evaluate.answers.prompts import reader_messages

    window = llm.context_window
    budgets = [cap] if cap is not None else []
    if window is not None:
        prompt = llm.count_prompt_tokens(reader_messages(style, replace(item, context="")))
        budgets.append(max(0, window - prompt - max_new_tokens))
    return min(budgets) if budgets else None


def _turns(sessions) -> list[Retrieved]:
    """The turns of ``sessions`` (in time order) as items in time order, dated by their session."""
    items = []
    for session in sessions:
        for turn in session.turns:
            items.append(Retrieved(0.0, turn.text, session_id=session.id, turn_id=turn.id, speaker=turn.speaker,
                                   timestamp=session.timestamp, order=len(items)))
    return items


def history_context(episode: Episode, question: Question, budget: int | None, counter,
                    evidence_only: bool = False) -> str:
    """The reference readers' context: the turns of the sessions before the question's (``evidence_only``: of
    its evidence sessions only), newest first while they fit ``budget`` tokens of ``counter`` (None: all),
    in time order."""
    sessions = sorted(episode.sessions, key=lambda s: s.index)[: question.position]  # never its session or later
    if evidence_only:
        query = next((q for q in episode.queries if q.id == question.query.id), question.query)
        wanted = set(query.evidence_sessions)
        turn_session = {t.id: s.id for s in episode.sessions for t in s.turns}
        memory_session = {m.id: m.session_id for m in episode.memories()}
        wanted |= {turn_session[t] for t in query.evidence_turns if t in turn_session}
        wanted |= {memory_session[m] for m in query.evidence_memories if m in memory_session}
        sessions = [s for s in sessions if s.id in wanted]
    items = _turns(sessions)
    if budget is None:  # no window known: every turn (one "token" each, so pack_context keeps them all)
        return pack_context(items[::-1], len(items) + 1, _OnePerText())
    return pack_context(items[::-1], budget, counter)


class _OnePerText:
    """A counter that counts any text as one token."""

    @staticmethod
    def count(text: str) -> int:
        return 1 if text else 0


def reference_items(suite: Suite, published: dict[str, Episode], questions: Sequence[Question], llm: LLM,
                    counter: TokenCounter, max_new_tokens: int, cap: int | None = None) -> list[AnswerItem]:
    """The items of the suite's reference readers (``answers.references``) for ``questions``."""
    answers = suite.answers
    if answers is None or not answers.references:
        return []
    model_tokens = ModelTokens(llm)
    out = []
    for reader in answers.references:
        for question in questions:
            episode = published[question.episode_id]
            empty = base_item(suite, episode, question, reader, "context", "", 0)
            text = fitted_history(llm, answers.reader_prompt, empty, episode, question, max_new_tokens, cap,
                                  model_tokens, evidence_only=reader == "oracle")
            out.append(replace(empty, context=text, context_tokens=counter.count(text)))
    return out


def fitted_history(llm: LLM, style: str, item: AnswerItem, episode: Episode, question: Question,
                   max_new_tokens: int, cap: int | None, counter: ModelTokens, evidence_only: bool = False) -> str:
    """:func:`history_context` within the reader's window, checked on the whole prompt: the budget of
    :func:`window_budget` sums the tokens of the lines one by one, and a reader prompt may lay the history out
    with headers of its own (LongMemEval's sessions and dates, RealMem's numbered memories) and the chat template
    add a system prompt (SmolLM2's), so the prompt as the model reads it is counted
    (:meth:`LLM.count_prompt_tokens`) and, while it overflows, the budget is scaled by the share of the history's laid-out
    cost that fits (less 0.5% of the window)."""
    from pipelines.evaluate.answers.prompts import reader_messages

    def prompt_tokens(context: str) -> int:  # the prompt as the model reads it (its chat template included)
        return llm.count_prompt_tokens(reader_messages(style, replace(item, context=context)))

    budget = window_budget(llm, style, item, max_new_tokens, cap)
    text = history_context(episode, question, budget, counter, evidence_only=evidence_only)
    window = llm.context_window
    if budget is None or window is None:
        return text
    base = prompt_tokens("")
    room = window - max_new_tokens - base       # what the laid-out history may cost
    for _ in range(12):
        cost = prompt_tokens(text) - base if text else 0
        if cost <= room or budget <= 0:
            return text if cost <= room else ""
        budget = min(budget - 1, int(budget * room / cost) - window // 200)
        text = history_context(episode, question, max(budget, 0), counter, evidence_only=evidence_only)
    return text if prompt_tokens(text) - base <= room else ""