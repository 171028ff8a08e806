"""Judges: the verdict on one reader answer, from an LLM judge's prompt or from a metric without a model.

A :class:`Judge` either asks a model (``needs_llm``: :meth:`Judge.messages` is the prompt, :meth:`Judge.parse`
reads the model's output) or computes its score directly (:meth:`Judge.score`). Its :meth:`Judge.applies`
says which items it judges (the others get no verdict under its name). :func:`run_judges` fills
``record.verdicts`` (judge name -> :class:`Verdict`), asking each LLM judge's questions in ONE batched
``llm.generate`` call; identical requests (two readers giving the same answer, two judges reading one
output) are sent once. An output that parses as no verdict is ``Verdict(score=None, parsed=False)``:
counted as unparseable, never as correct.

Registry (:data:`JUDGES`, suite YAML ``answers.judges``; one name may stand for several judges):

| name | judges (verdict keys) | from | score |
| --- | --- | --- | --- |
| ``longmemeval`` | ``longmemeval`` | xiaowu0162/LongMemEval src/evaluation/evaluate_qa.py | 1/0 |
| ``answer_check`` | ``answer_check`` | LongMemEval's default / abstention prompt, any data | 1/0 |
| ``locomo_f1`` | ``locomo_f1`` | snap-research/locomo task_eval/evaluation.py (:mod:`.lexical`) | [0, 1] |
| ``locomo_llm`` | ``locomo_llm`` | mem0ai/mem0 evaluation/metrics/llm_judge.py | 1/0 |
| ``realmem_qa`` | ``realmem_qa`` | zhiyuan5986/RealMemBench eval/compute_llm_metrics_for_realmem.py | 0-3 |
| ``realmem_memory`` | ``realmem_memory_recall``, ``realmem_memory_helpful`` | the same file, one call | [0, 1], 0-2 |
| ``geval`` | ``geval_coherence``, ``geval_engagingness``, ``geval_fluency`` | G-Eval form filling, G-Long's 1-5 | 1-5 |
| ``token_f1`` / ``exact`` | ``token_f1`` / ``exact`` | LoCoMo's f1_score / exact_match_score | [0, 1] / 1/0 |

Official behaviour kept, and where ours differs (each judge's docstring has the detail):

- ``longmemeval``: the per-question-type prompt (abstention first, whatever the type), as one user message,
  10 new tokens, temperature 0; correct when "yes" is anywhere in the lower-cased output, as the official
  ``'yes' in eval_response.lower()`` (so "eyes" counts). The official code counts every other output as
  incorrect; here an output with the word "no" is incorrect and one with neither word is unparseable:
  the accuracy is the official figure either way, the unparseable count is a health signal.
- ``locomo_llm``: mem0's ACCURACY_PROMPT; label = ``json.loads(extract_json(output))["label"]``, 1 if
  "CORRECT". mem0 asks the API for a bare JSON object (``response_format``); the interface here has no such
  setting, so when the whole output is not JSON the last ``{...}`` object in it is read. A label other than
  CORRECT / WRONG is unparseable. Temperature 0 as mem0; 60 new tokens (mem0 sets no limit). Abstention
  questions are not judged (mem0 skips LoCoMo category 5, LoCoMo's abstention questions).
- ``realmem_qa`` / ``realmem_memory``: the official prompts and ``extract_json_from_text``; the QA judge
  reads ``item.evidence`` (the ``memory_used`` texts, joined by newlines; "No specific memory annotation
  found." when there are none) and ``item.reference`` (the gold answer); the memory judge numbers the
  context lines as retrieved chunks and is not run when the item has no evidence or no context, as the
  official code skips it. A score outside the scale is unparseable (the official mean would take it).
- ``geval``: G-Eval's form-filling prompt, one judge per criterion, 5 new tokens, score = the number at the
  start of the output (G-Eval's ``parse_output``). G-Eval samples 20 outputs at temperature 2 and averages
  them, counting an unreadable one as 0; here one greedy output, and an unreadable or out-of-scale one is
  unparseable. :mod:`pipelines.evaluate.answers.judge_prompts` says what its prompts reproduce.

:meth:`Judge.summary` aggregates a judge's verdicts into the figures the report shows
(:mod:`pipelines.evaluate.answers.aggregate` calls it per reader, setting and category). Keys, in this order:

- the judge's headline metric, named by :attr:`Judge.metric`; absent when ``n`` is 0 (and, for a graded
  judge, when no verdict parsed):
  ``accuracy`` (yes/no judges and ``exact``): correct verdicts / ``n``, an unparseable verdict counting as
  NOT correct (LongMemEval's and mem0's accuracy); ``f1`` (``locomo_f1``, ``token_f1``): the mean F1;
  ``score`` (graded judges: ``realmem_*``, ``geval_*``): the mean of the PARSED scores (RealMem's
  ``average_qa_score``; unparseable verdicts are left out, and counted).
- ``n``: verdicts aggregated; ``unparseable``: how many parsed as no verdict; ``unparseable_share``: their
  share of ``n`` (0.0 when ``n`` is 0).
- ``realmem_qa`` adds ``hallucination_rate`` and ``perfect_rate``: shares of parsed scores equal to 0 and
  to 3 (RealMem's ``qa_hallucination_rate`` / ``qa_perfect_rate``).
"""

from __future__ import annotations

import json
import re
from abc import ABC
from dataclasses import replace
from typing import Callable, Sequence

from pipelines.errors import ConfigError
from pipelines.evaluate.answers import lexical
from pipelines.evaluate.answers.judge_prompts import (GEVAL_CRITERIA, GEVAL_TEMPLATE, LONGMEMEVAL_JUDGE,
                                                    LONGMEMEVAL_TYPES, MEM0_ACCURACY_PROMPT, REALMEM_MEMORY_PROMPT,
                                                    REALMEM_NO_MEMORY, REALMEM_QA_INPUT, REALMEM_QA_PROMPT)
from pipelines.evaluate.answers.prompts import numbered_memories
from pipelines.evaluate.answers.types import AnswerItem, AnswerRecord, Verdict
from pipelines.llm.base import LLM, Completion, GenerationSettings, Messages


def _json_object(text: str) -> dict | None:
    """RealMem's ``extract_json_from_text``: a ```json block, else the widest {...}, else the whole text."""
    try:
        block = re.search(r"```json\s*(.*?)\s*```", text, re.DOTALL)
        if block:
            found = json.loads(block.group(1))
        else:
            braces = re.search(r"\{.*\}", text, re.DOTALL)
            found = json.loads(braces.group(0) if braces else text)
    except (ValueError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _number(value: object, low: float, high: float) -> float | None:
    """``value`` as a score when it is a number (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        return None
    return float(value)


def _unparseable(name: str, output: str) -> Verdict:
    return Verdict(judge=name, score=None, parsed=False, raw=output)


class Judge(ABC):
    """One verdict per judged item; see the module docstring for the summary keys."""

    name: str = ""
    source: str = ""                                  # where the prompt or metric comes from
    needs_llm: bool = False
    settings: GenerationSettings | None = None        # the judge call's settings (LLM judges)
    metric: str = "score"                             # summary()'s headline key: accuracy | f1 | score

    def applies(self, item: AnswerItem) -> bool:
        """Whether this judge judges ``item`` (the others get no verdict under its name)."""
        return True

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        raise TypeError(f"judge {self.name} computes its score without a model (use score()).")

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        raise TypeError(f"judge {self.name} computes its score without a model (use score()).")

    def score(self, item: AnswerItem, answer: str) -> Verdict:
        raise TypeError(f"judge {self.name} asks a model (use messages() and parse()).")

    def summary(self, verdicts: Sequence[Verdict]) -> dict[str, float]:
        """The headline metric first (absent without verdicts), then ``n``, ``unparseable``, ``unparseable_share``."""
        n = len(verdicts)
        parsed = [v.score for v in verdicts if v.parsed and v.score is not None]
        out: dict[str, float] = {}
        if n and self.metric == "accuracy":
            out["accuracy"] = sum(1 for s in parsed if s >= 1.0) / n      # unparseable: not correct
        elif n and self.metric == "f1":
            out["f1"] = sum(parsed) / n
        elif parsed:
            out["score"] = sum(parsed) / len(parsed)                       # unparseable: left out, counted
        out.update(n=n, unparseable=n - len(parsed), unparseable_share=(n - len(parsed)) / n if n else 0.0)
        return out


class LongMemEvalJudge(Judge):
    """LongMemEval's QA accuracy: ``get_anscheck_prompt(question_type, question, answer, response, abstention)``
    (``item.category`` is the published question_type, ``item.abstention`` the ``_abs`` question id; for those
    ``item.reference`` holds the explanation of why it cannot be answered)."""

    name, metric, needs_llm = "longmemeval", "accuracy", True
    source = "xiaowu0162/LongMemEval src/evaluation/evaluate_qa.py"
    settings = GenerationSettings(max_new_tokens=10, temperature=0.0)

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        if item.abstention:
            template = LONGMEMEVAL_JUDGE["abstention"]
        elif item.category in ("single-session-user", "single-session-assistant", "multi-session"):
            template = LONGMEMEVAL_JUDGE["default"]
        elif item.category in LONGMEMEVAL_JUDGE:
            template = LONGMEMEVAL_JUDGE[item.category]
        else:
            raise ConfigError(f"judge longmemeval: query {item.query_id} of suite {item.suite} has question type "
                              f"{item.category!r}; LongMemEval's prompts cover {', '.join(LONGMEMEVAL_TYPES)}.")
        return [{"role": "user", "content": template.format(item.question, item.reference, answer)}]

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        text = output.strip().lower()
        if "yes" in text:
            return Verdict(judge=self.name, score=1.0, label="yes", raw=output)
        if re.search(r"\bno\b", text):
            return Verdict(judge=self.name, score=0.0, label="no", raw=output)
        return _unparseable(self.name, output)


class AnswerCheckJudge(LongMemEvalJudge):
    """LongMemEval's generic answer check for data without its question types (the synthetic suite): the
    ``default`` prompt (the one LongMemEval uses for single-session-user / -assistant and multi-session
    questions) for every item, the abstention prompt for abstention items; the same yes/no verdict."""

    name = "answer_check"

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        template = LONGMEMEVAL_JUDGE["abstention" if item.abstention else "default"]
        return [{"role": "user", "content": template.format(item.question, item.reference, answer)}]


class Mem0Judge(Judge):
    """mem0's LLM judge for LoCoMo (``evaluate_llm_judge``): CORRECT / WRONG as JSON ``{"label": ...}``."""

    name, metric, needs_llm = "locomo_llm", "accuracy", True
    source = "mem0ai/mem0 evaluation/metrics/llm_judge.py"
    settings = GenerationSettings(max_new_tokens=60, temperature=0.0)   # a sentence + {"label": ...}: ~40

    def applies(self, item: AnswerItem) -> bool:
        return not item.abstention

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        content = MEM0_ACCURACY_PROMPT.format(question=item.question, gold_answer=item.reference,
                                              generated_answer=answer)
        return [{"role": "user", "content": content}]

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        text = output.strip()
        fenced = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)   # mem0's extract_json
        candidates = [fenced.group(1) if fenced else text, *reversed(re.findall(r"\{[^{}]*\}", text))]
        for candidate in candidates:
            try:
                found = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(found, dict) and found.get("label") in ("CORRECT", "WRONG"):
                label = found["label"]
                return Verdict(judge=self.name, score=1.0 if label == "CORRECT" else 0.0, label=label, raw=output)
        return _unparseable(self.name, output)


class RealMemQAJudge(Judge):
    """RealMem's QA score (0-3) of the candidate answer against the memory points and the reference answer."""

    name, needs_llm = "realmem_qa", True
    source = "zhiyuan5986/RealMemBench eval/compute_llm_metrics_for_realmem.py"
    settings = GenerationSettings(max_new_tokens=128, temperature=0.0)

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        memory = "\n".join(e for e in item.evidence if e) or REALMEM_NO_MEMORY
        content = REALMEM_QA_PROMPT + REALMEM_QA_INPUT.format(
            question=item.question.strip(), gt_memory=memory, gt_answer=item.reference.strip(),
            generated_answer=answer)
        return [{"role": "user", "content": content}]

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        found = _json_object(output)
        score = _number(found.get("score"), 0, 3) if found else None
        if score is None:
            return _unparseable(self.name, output)
        return Verdict(judge=self.name, score=score, label=f"{score:g}", raw=output)

    def summary(self, verdicts: Sequence[Verdict]) -> dict[str, float]:
        out = super().summary(verdicts)
        parsed = [v.score for v in verdicts if v.parsed and v.score is not None]
        if parsed:
            out["hallucination_rate"] = sum(1 for s in parsed if s == 0) / len(parsed)
            out["perfect_rate"] = sum(1 for s in parsed if s == 3) / len(parsed)
        return out


class RealMemMemoryJudge(Judge):
    """One figure of RealMem's memory evaluation (``Mem_eval_prompt``): ``key`` of the judge's JSON within
    [0, ``high``]. Both figures come from the same prompt, so :func:`run_judges` asks it once."""

    needs_llm = True
    source = "zhiyuan5986/RealMemBench eval/compute_llm_metrics_for_realmem.py"
    settings = GenerationSettings(max_new_tokens=256, temperature=0.0)

    def __init__(self, name: str, key: str, high: float):
        self.name, self.key, self.high = name, key, high

    def applies(self, item: AnswerItem) -> bool:
        return any(item.evidence) and bool(numbered_memories(item.context))

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        content = REALMEM_MEMORY_PROMPT.format(question=item.question.strip(),
                                               groundtruth_memory="\n".join(e for e in item.evidence if e),
                                               retrieved_memory=numbered_memories(item.context))
        return [{"role": "user", "content": content}]

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        found = _json_object(output)
        score = _number(found.get(self.key), 0, self.high) if found else None
        if score is None:
            return _unparseable(self.name, output)
        return Verdict(judge=self.name, score=score, label=f"{score:g}", raw=output)


class GEvalJudge(Judge):
    """One G-Eval criterion of a generated response (``judge_prompts.GEVAL_CRITERIA``), scored 1-5."""

    needs_llm = True
    source = "G-Eval form filling (nlpyang/geval), criteria on G-Long's 1-5 scale"
    settings = GenerationSettings(max_new_tokens=5, temperature=0.0)

    def __init__(self, criterion: str):
        self.criterion, self.name = criterion, f"geval_{criterion}"

    def messages(self, item: AnswerItem, answer: str) -> Messages:
        definition, steps, form = GEVAL_CRITERIA[self.criterion]
        content = GEVAL_TEMPLATE.format(criterion=definition, steps=steps, history=item.question,
                                        response=answer, form=form)
        return [{"role": "user", "content": content}]

    def parse(self, item: AnswerItem, answer: str, output: str) -> Verdict:
        matched = re.search(r"^ ?([\d\.]+)", output)       # G-Eval's parse_output
        try:
            score = _number(float(matched.group(1)), 1, 5) if matched else None
        except ValueError:
            score = None
        if score is None:
            return _unparseable(self.name, output)
        return Verdict(judge=self.name, score=score, label=matched.group(1), raw=output)


class LoCoMoF1Judge(Judge):
    """LoCoMo's token F1 per category (:func:`lexical.locomo_qa_score`), no model."""

    name, metric = "locomo_f1", "f1"
    source = "snap-research/locomo task_eval/evaluation.py"

    def score(self, item: AnswerItem, answer: str) -> Verdict:
        if item.category not in lexical.LOCOMO_CATEGORIES:
            raise ConfigError(f"judge locomo_f1: query {item.query_id} of suite {item.suite} has category "
                              f"{item.category!r}; LoCoMo's F1 rules cover categories 1-5.")
        value = lexical.locomo_qa_score(answer, item.reference, item.category)
        return Verdict(judge=self.name, score=value, label=f"{value:.4f}")


class LexicalJudge(Judge):
    """A generic metric for any suite: LoCoMo's ``f1_score`` (``token_f1``) or ``exact_match_score``
    (``exact``) against ``item.reference``; an abstention question is scored by LoCoMo's adversarial rule
    (1 when the answer says the information is not mentioned / not available)."""

    source = "snap-research/locomo task_eval/evaluation.py"

    def __init__(self, name: str, metric: str, fn: Callable[[str, str], float]):
        self.name, self.metric, self.fn = name, metric, fn

    def score(self, item: AnswerItem, answer: str) -> Verdict:
        if item.abstention:
            value = 1.0 if lexical.adversarial_correct(answer) else 0.0
        else:
            value = float(self.fn(answer, item.reference))
        return Verdict(judge=self.name, score=value, label=f"{value:.4f}")


JUDGES: dict[str, tuple[Judge, ...]] = {
    "longmemeval": (LongMemEvalJudge(),),
    "locomo_f1": (LoCoMoF1Judge(),),
    "answer_check": (AnswerCheckJudge(),),
    "locomo_llm": (Mem0Judge(),),
    "realmem_qa": (RealMemQAJudge(),),
    "realmem_memory": (RealMemMemoryJudge("realmem_memory_recall", "Mem_recall", 1),
                       RealMemMemoryJudge("realmem_memory_helpful", "Mem_helpful_score", 2)),
    "geval": tuple(GEvalJudge(c) for c in GEVAL_CRITERIA),
    "token_f1": (LexicalJudge("token_f1", "f1", lexical.f1_score),),
    "exact": (LexicalJudge("exact", "accuracy", lexical.exact_match_score),),
}


def make_judges(names: Sequence[str]) -> list[Judge]:
    """The judges registered under ``names`` (a name may stand for several), each once, in order."""
    unknown = [n for n in names if n not in JUDGES]
    if unknown:
        raise ConfigError(f"unknown judge(s) {', '.join(map(repr, unknown))}; known: {', '.join(JUDGES)}.")
    judges = {j.name: j for n in names for j in JUDGES[n]}
    return list(judges.values())


def count_judgements(judges: Sequence[Judge], records: Sequence[AnswerRecord]) -> int:
    """How many verdicts :func:`run_judges` will give (the total of its progress callback)."""
    return sum(1 for judge in judges for r in records if judge.applies(r.item))


def _request_key(messages: Messages, settings: GenerationSettings) -> str:
    return json.dumps([messages, settings.as_dict()], sort_keys=True, ensure_ascii=False)


def run_judges(judges: Sequence[Judge], records: Sequence[AnswerRecord], llm: LLM | None = None,
               progress: Callable[[int], None] | None = None) -> None:
    """Fill ``record.verdicts[judge.name]`` for every record each judge applies to.

    An LLM judge's requests go to ``llm`` in one ``generate`` call (``progress`` passed through); a request
    identical to one already answered in this call (same messages and settings) is not sent again: its
    verdict reuses that output and is marked ``cached``. Model-free judges report ``progress`` per judge."""
    answered: dict[str, Completion] = {}
    for judge in judges:
        todo = [r for r in records if judge.applies(r.item)]
        if not judge.needs_llm:
            for record in todo:
                record.verdicts[judge.name] = judge.score(record.item, record.answer)
            if progress and todo:
                progress(len(todo))
            continue
        if llm is None:
            raise ConfigError(f"judge {judge.name} needs a language model (llm.judge), none was given.")
        requests = [judge.messages(r.item, r.answer) for r in todo]
        keys = [_request_key(m, judge.settings) for m in requests]
        new = {k: m for k, m in zip(keys, requests) if k not in answered}   # first of each, in order
        if new:
            answered.update(zip(new, llm.generate(list(new.values()), judge.settings, progress)))
        if progress and len(todo) > len(new):
            progress(len(todo) - len(new))
        sent = set(new)
        for record, key in zip(todo, keys):
            completion = answered[key]
            verdict = judge.parse(record.item, record.answer, completion.text)
            record.verdicts[judge.name] = replace(
                verdict, raw=completion.text, prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens, latency_s=completion.latency_s,
                cached=completion.cached or key not in sent)
            sent.discard(key)
