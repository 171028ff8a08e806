"""The records of answer-level evaluation: what a reader is asked, what it answered, what the judges said.

One :class:`AnswerItem` per (reader, setting, query): the question a reader answers from one context. A reader
is a memory strategy of the suite (its ``context(query, budget)``) or a reference reader (``full_history``:
as much of the history before the question as the model's window holds; ``oracle``: the evidence sessions
only). The setting is ``context`` (the strategy's budgeted context) or ``top<k>`` (G-Long's Accuracy@k: the
strategy's top k retrieved items). The reader's answer and every judge's :class:`Verdict` make an
:class:`AnswerRecord`, one line of reports/queries.jsonl.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

REFERENCE_READERS = ("full_history", "oracle")


@dataclass(frozen=True)
class AnswerItem:
    """One question put to the reader with one context."""

    suite: str
    reader: str                   # a strategy name, or "full_history" / "oracle"
    setting: str                  # "context" (budgeted context) or "top<k>" (top k retrieved items)
    episode_id: str
    query_id: str
    question: str
    reference: str                # the gold answer ("" when the data has none)
    context: str                  # the memory text the reader sees
    context_tokens: int           # tokens of ``context`` (the suite's token counter)
    category: str = "uncategorised"   # the query's category (LoCoMo 1-5, LongMemEval question type, ...)
    question_date: str | None = None  # the question date where the dataset has one (LongMemEval, LoCoMo)
    abstention: bool = False      # the answer is not in the history (the judge expects a refusal)
    session_index: int = 0        # Session.index of the session it is asked in
    evidence: tuple[str, ...] = ()    # evidence texts the judges that read them get (RealMem memory points)


@dataclass(frozen=True)
class Verdict:
    """One judge's verdict on one answer.

    ``score``: the judge's number (1.0 / 0.0 for a yes/no judge, the 0-3 or 1-5 scale of a graded one, F1 in
    [0, 1]); None when the judge's output parses as no verdict (``parsed`` False): counted as unparseable,
    never as correct."""

    judge: str
    score: float | None
    parsed: bool = True
    label: str = ""               # the verdict as the judge said it ("yes", "CORRECT", "2", ...)
    raw: str = ""                 # the judge model's whole output ("" for a metric without a model)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    latency_s: float = 0.0        # the judge call's wall time (its share of a batch); 0 for a metric without a model


@dataclass
class AnswerRecord:
    """An item, the reader's answer and the judges' verdicts."""

    item: AnswerItem
    answer: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    verdicts: dict[str, Verdict] = field(default_factory=dict)   # judge name -> verdict

    def to_json(self) -> dict[str, Any]:
        """One line of reports/queries.jsonl (``kind: answer``)."""
        return {"kind": "answer", **asdict(self.item), "answer": self.answer,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "latency_s": round(self.latency_s, 4), "cached": self.cached,
                "verdicts": {name: asdict(v) for name, v in self.verdicts.items()}}
