"""PersonaExt (Zhu et al. 2023): utterances with persona triplets, G-Long's extractor data (seed 003).

Published shape (FORMATS.md): jsonl records with ``triplets: [{tokens: [...], head:
[token positions], tail: [token positions], label: "relation_name", ...}]``, and a
``schema.json`` listing the relation labels (about 105, e.g. ``want_job``,
``has_profession``). A triplet is (head tokens, label, tail tokens) over its
utterance ``tokens``.

Mapping: one Episode per record (id ``<file stem>:<line>``, split from the file name,
default ``train``, one speaker ``speaker``, one session ``s1``). Triplets over the same
token list are one utterance: one Turn (text = the tokens joined by spaces) whose
triplets are Triplet(subject = head tokens joined, relation = label, object = tail
tokens joined), in order of first appearance.

``schema.json`` is looked for in the folder given (or beside the file given). Its
labels are a JSON list of strings, an object whose keys are the labels, or an object
with a ``relations`` / ``labels`` list. When it is present, a triplet whose label it
does not list is dropped; when it is absent, labels are not checked.

Drop reasons: ``bad_triplet`` (missing or wrongly typed field, a position outside the
tokens, an empty span), ``unknown_relation``, ``empty_record`` (no usable utterance:
no episode).
"""

from __future__ import annotations

from pathlib import Path

from pipelines.data.loaders import register
from pipelines.data.loaders.base import (LoadResult, Where, build, check, files_in, get,
                                         iter_jsonl, load_json, split_from_name)
from pipelines.data.schema import Episode, Session, Speaker, Triplet, Turn

SPEAKER = "speaker"
SCHEMA_FILE = "schema.json"


def relation_labels(path: str | Path) -> set[str] | None:
    """The labels of ``schema.json`` (in ``path`` if a folder, else beside it); None if absent."""
    path = Path(path)
    schema = (path if path.is_dir() else path.parent) / SCHEMA_FILE
    if not schema.is_file():
        return None
    data = load_json(schema)
    where = Where(str(schema), "top level")
    if isinstance(data, dict):
        for key in ("relations", "labels"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    labels = list(data) if isinstance(data, dict) else data
    check(labels, list, where, "labels")
    for i, label in enumerate(labels):
        check(label, str, where, f"labels[{i}]")
    return set(labels)


@register("personaext")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    labels = relation_labels(path)
    for file in files_in(path, "*.jsonl"):
        split = split_from_name(file, "train")
        for lineno, record in iter_jsonl(file):
            where = Where(str(file), f"line {lineno}")
            episode = _episode(record, where, f"{file.stem}:{lineno}", split, labels, result)
            if episode is not None:
                result.episodes.append(episode)
    return result


def _span(tokens: list[str], positions: object, where: Where, name: str) -> str:
    check(positions, list, where, name)
    if not positions:
        raise where.error("empty token span", field=name)
    for i, p in enumerate(positions):
        check(p, int, where, f"{name}[{i}]")
        if not 0 <= p < len(tokens):
            raise where.error(f"position {p} outside the {len(tokens)} tokens", field=name)
    return " ".join(tokens[p] for p in positions)


def _episode(record: object, where: Where, episode_id: str, split: str, labels: set[str] | None,
             result: LoadResult) -> Episode | None:
    triplets = get(record, "triplets", list, where)
    turns: dict[tuple[str, ...], Turn] = {}
    for k, raw in enumerate(triplets):
        twhere = where.at(f"triplets[{k}]")
        with result.dropping("bad_triplet"):
            tokens = get(raw, "tokens", list, twhere)
            for i, token in enumerate(tokens):
                check(token, str, twhere, f"tokens[{i}]")
            if not tokens:
                raise twhere.error("empty token list", field="tokens")
            key = tuple(tokens)
            if key not in turns:
                turns[key] = build(Turn, twhere, id=f"t{len(turns)}", speaker=SPEAKER, text=" ".join(tokens))
            label = get(raw, "label", str, twhere)
            head = _span(tokens, get(raw, "head", list, twhere), twhere, "head")
            tail = _span(tokens, get(raw, "tail", list, twhere), twhere, "tail")
            if labels is not None and label not in labels:
                result.drop("unknown_relation", twhere.example(f"label {label!r} not in {SCHEMA_FILE}"))
                continue
            turns[key].triplets.append(build(Triplet, twhere, subject=head, relation=label, object=tail))
    if not turns:
        result.drop("empty_record", where.example("no utterance with valid tokens"))
        return None
    session = Session(id="s1", index=0, turns=list(turns.values()))
    return build(Episode, where, id=episode_id, source="personaext", main_speaker=SPEAKER,
                 speakers=[Speaker(name=SPEAKER)], sessions=[session], split=split)
