"""The figures of one suite's answers: per reader and setting, each judge's summary, overall and per category.

:func:`summarise` turns the :class:`~pipelines.evaluate.answers.types.AnswerRecord` list of an answer run into
``{reader: {setting: figures}}``. The figures of a (reader, setting):

- ``answered``: how many questions it answered;
- ``<judge>/<metric>``: what the judge's ``summary(verdicts)`` says over them (``longmemeval/accuracy``,
  ``locomo_f1/f1``, ``realmem_qa/score``, ...): each judge decides how its verdicts aggregate, and an
  unparseable verdict is never counted correct (it counts as wrong in an accuracy, see the judge's summary);
- ``<judge>/<metric>/<category>``: the same over the questions of one category (LoCoMo's categories,
  LongMemEval's question types);
- ``unparseable/<judge>``: how many of its verdicts parsed as no verdict (0 for a model-free metric);
- ``context_tokens``, ``prompt_tokens``, ``completion_tokens``: means per question (the memory text the
  reader saw, in the suite's token counter; the reader's prompt and answer, in the reader model's tokens).

G-Long's Accuracy@k is the headline figure of setting ``top<k>``: the reader answers from the strategy's top k
retrieved items (:func:`accuracy_at_k`). A reader that was not run has no figures here: the answer run's
``missing`` says why, and the report shows that reason, never zeros.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import TYPE_CHECKING, Protocol

from pipelines.errors import ConfigError
from pipelines.evaluate.answers.types import REFERENCE_READERS, AnswerRecord, Verdict

if TYPE_CHECKING:
    from pipelines.evaluate.answers.run import AnswerRun

CONTEXT = "context"          # the setting of the strategy's budgeted context
Summary = Mapping[str, Mapping[str, Mapping[str, float]]]   # reader -> setting -> figure -> value (summarise)
TOP_K = re.compile(r"^top(\d+)$")


class Summarises(Protocol):
    """What aggregation needs of a judge (pipelines.evaluate.answers.judges.Judge)."""

    metric: str                   # the headline key of its summary: accuracy | f1 | score

    def summary(self, verdicts: Sequence[Verdict]) -> dict[str, float]: ...


def judge_of(name: str, judges: Mapping[str, Summarises] | None = None) -> Summarises:
    """The judge whose verdicts are named ``name`` (``locomo_llm``, ``geval_coherence``...): from ``judges``
    when given, else the project's registry (``JUDGES``, where one name may stand for several judges)."""
    if judges is None:
        from pipelines.evaluate.answers.judges import JUDGES

        judges = {judge.name: judge for group in JUDGES.values() for judge in group}
    if name not in judges:
        raise ConfigError(f"an answer verdict names judge {name!r}, which is not registered (known: "
                          f"{', '.join(sorted(judges))}).")
    return judges[name]


def is_count(key: str) -> bool:
    """A summary key that counts verdicts (``n``, ``unparseable``, ``unparseable_share``), not a score."""
    return key == "n" or key.startswith("unparseable")


def judge_figures(name: str, judge: Summarises, verdicts: Sequence[Verdict]) -> dict[str, float]:
    """A judge's ``summary(verdicts)`` as flat figures: ``<judge>/<metric>`` (its headline metric first, absent
    when the summary has none: no verdict to average) and ``unparseable/<judge>`` (the count)."""
    summary = judge.summary(verdicts)
    keys = [key for key in dict.fromkeys([judge.metric, *summary]) if key in summary and not is_count(key)]
    out = {f"{name}/{key}": float(summary[key]) for key in keys if summary[key] is not None}
    out[f"unparseable/{name}"] = float(summary.get("unparseable", 0))
    return out


def _figures(records: Sequence[AnswerRecord], judges: Mapping[str, Summarises] | None) -> dict[str, float]:
    out: dict[str, float] = {"answered": float(len(records))}
    names = list(dict.fromkeys(name for r in records for name in r.verdicts))
    categories = list(dict.fromkeys(r.item.category for r in records))
    for name in names:
        judge = judge_of(name, judges)
        out.update(judge_figures(name, judge, [r.verdicts[name] for r in records if name in r.verdicts]))
        if categories != ["uncategorised"]:
            for category in categories:
                verdicts = [r.verdicts[name] for r in records if name in r.verdicts and r.item.category == category]
                if verdicts:
                    out.update({f"{key}/{category}": value for key, value in judge_figures(name, judge, verdicts)
                                .items() if not key.startswith("unparseable/")})
    out["context_tokens"] = fmean(r.item.context_tokens for r in records)
    out["prompt_tokens"] = fmean(r.prompt_tokens for r in records)
    out["completion_tokens"] = fmean(r.completion_tokens for r in records)
    return out


def summarise(records: AnswerRun | Sequence[AnswerRecord], judges: Mapping[str, Summarises] | None = None
              ) -> dict[str, dict[str, dict[str, float]]]:
    """``{reader: {setting: figures}}`` of an answer run (or its records), readers in the order they answered
    (the suite's strategies, then the reference readers), settings ``context`` first then ``top<k>`` by k.
    ``judges`` maps a judge name to the judge that summarises its verdicts (default: the registry)."""
    records = list(getattr(records, "records", records))
    groups: dict[str, dict[str, list[AnswerRecord]]] = {}
    for record in records:
        groups.setdefault(record.item.reader, {}).setdefault(record.item.setting, []).append(record)
    ordered = [r for r in groups if r not in REFERENCE_READERS] + [r for r in REFERENCE_READERS if r in groups]
    return {reader: {setting: _figures(groups[reader][setting], judges) for setting in sorted(
        groups[reader], key=setting_order)} for reader in ordered}


def setting_order(setting: str) -> tuple[int, int, str]:
    """``context`` first, then ``top<k>`` by k, then anything else by name."""
    match = TOP_K.match(setting)
    return (0, 0, "") if setting == CONTEXT else (1, int(match.group(1)), "") if match else (2, 0, setting)


def judges_in(summary: Summary) -> list[str]:
    """The judges that gave verdicts in a :func:`summarise` result, in order."""
    return list(dict.fromkeys(key.split("/", 1)[1] for settings in summary.values() for figures in settings.values()
                              for key in figures if key.startswith("unparseable/")))


def headline_key(figures: Mapping[str, float], judge: str) -> str | None:
    """``<judge>/<metric>`` of the judge's headline figure among ``figures`` (its first: the judge's ``metric``),
    None when the judge has none there (no verdict, or none parsed for a mean of parsed scores)."""
    return next((key for key in figures if key.startswith(f"{judge}/") and key.count("/") == 1), None)


def accuracy_at_k(summary: Summary, judge: str) -> dict[str, dict[str, float]]:
    """G-Long's Accuracy@k per reader: the judge's headline figure in setting ``top<k>``, as ``accuracy@<k>``
    (readers without top-k settings, the reference readers, have none)."""
    out: dict[str, dict[str, float]] = {}
    for reader, settings in summary.items():
        for setting, figures in settings.items():
            match = TOP_K.match(setting)
            key = headline_key(figures, judge) if match else None
            if key is not None:
                out.setdefault(reader, {})[f"accuracy@{match.group(1)}"] = figures[key]
    return out


def flat(summary: Summary) -> dict[str, dict[str, float]]:
    """Reader -> ``answers/<setting>/<figure>``: the keys metrics.json gives each reader."""
    return {reader: {f"answers/{setting}/{key}": value for setting, figures in settings.items()
                     for key, value in figures.items()} for reader, settings in summary.items()}
