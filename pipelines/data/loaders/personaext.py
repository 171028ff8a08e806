"""PersonaExt (Zhu et al. 2023, PAED): utterances with persona triplets, G-Long's extractor data (seed 003).

Published shapes (FORMATS.md), both read:

- one triplet a line, ``{"tokens": [...], "head": [token positions], "tail": [token positions], "label":
  "relation_name"}`` (the pairs file gathered from PAED's dev and test files: 22,566 lines, one utterance each);
- PAED's split files, one utterance a line, ``{"triplets": [{"tokens", "head", "tail", "label", ...}, ...]}``.

A triplet is (head tokens, label, tail tokens) over its utterance ``tokens``: the subject and the object are the
tokens at the listed positions, joined by spaces in the order listed (1,412 of the pairs have a span with a gap,
e.g. "blue shoes" from "blue suede shoes"); the relation is the label as published, less one misspelling:
``have_chidren`` (404 pairs, and in schema.json) is read as ``have_children`` (47 pairs), one relation under two
spellings otherwise (flagged ``relation_respelled``).

``schema.json`` is looked for in the folder given (or beside the file given). Its labels are PAED's
``{"relation_types": [{"types": [{"type": label}, ...]}, ...]}``, a JSON list of strings, an object with a
``relations`` / ``labels`` list, or an object whose keys are the labels. PAED's published schema.json is not valid
JSON (trailing commas, a missing comma): when strict JSON fails it is read as Hjson, a JSON superset that allows
both (flagged ``schema_json_repaired``). A label the schema does not list is kept and flagged
``relation_not_in_schema``: PAED's own pairs use five labels its schema lacks (50 pairs), and dropping the triplet
would leave its utterance looking fact-free.

Mapping: one Episode per line (id ``<file stem>:<line>``, split from the file name, default ``train``, one
speaker ``speaker``, one session ``s1``). Triplets over the same token list are one utterance: one Turn (text =
the tokens joined by spaces) whose triplets are in order of first appearance.

Drop reasons: ``bad_triplet`` (missing or wrongly typed field, a position outside the tokens, an empty span),
``empty_record`` (no usable utterance: no episode). An utterance is kept only with a well-formed triplet: one
whose triplets are all malformed would read as fact-free, a wrong "[]" example for the extractor. A line that is
neither shape (no ``triplets``, no ``tokens``) stops the load, naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import (LoadResult, Where, build, check, files_in, get,
                                         iter_jsonl, load_json, read_text, split_from_name)
from pipelines.data.schema import Episode, Session, Speaker, Triplet, Turn
from pipelines.errors import DataError

SPEAKER = "speaker"
SCHEMA_FILE = "schema.json"
RELATION_FIXES = {"have_chidren": "have_children"}  # a misspelt label of PAED's data and schema


def schema_path(path: str | Path) -> Path:
    path = Path(path)
    return (path if path.is_dir() else path.parent) / SCHEMA_FILE


def read_schema(path: str | Path) -> tuple[object, bool] | None:
    """The parsed ``schema.json`` of ``path`` and whether it needed Hjson's leniency; None if absent."""
    schema = schema_path(path)
    if not schema.is_file():
        return None
    try:
        return load_json(schema), False
    except DataError as strict:
        import hjson

        try:
            return hjson.loads(read_text(schema)), True
        except hjson.HjsonDecodeError:
            raise strict from None


def relation_labels(path: str | Path) -> set[str] | None:
    """The labels of ``schema.json`` (in ``path`` if a folder, else beside it), respelled; None if absent."""
    read = read_schema(path)
    return None if read is None else _labels(read[0], Where(str(schema_path(path)), "top level"))


def _labels(data: object, where: Where) -> set[str]:
    if isinstance(data, dict) and "relation_types" in data:
        groups = get(data, "relation_types", list, where)
        labels = []
        for i, group in enumerate(groups):
            for j, kind in enumerate(get(group, "types", list, where, name=f"relation_types[{i}].types")):
                labels.append(get(kind, "type", str, where, name=f"relation_types[{i}].types[{j}].type"))
        data = labels
    if isinstance(data, dict):
        for key in ("relations", "labels"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    labels = list(data) if isinstance(data, dict) else data
    check(labels, list, where, "labels")
    for i, label in enumerate(labels):
        check(label, str, where, f"labels[{i}]")
    return {RELATION_FIXES.get(label, label) for label in labels}


@register("personaext")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    read = read_schema(path)
    labels = None
    if read is not None:
        data, repaired = read
        where = Where(str(schema_path(path)), "top level")
        if repaired:
            result.flag("schema_json_repaired", where.example("not valid JSON; read as Hjson"))
        labels = _labels(data, where)
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


def _triplets(record: object, where: Where) -> list[tuple[object, Where]]:
    """The raw triplets of a line with their addresses: PAED's ``triplets`` list, or the line itself."""
    if isinstance(record, dict) and "triplets" not in record and "tokens" in record:
        return [(record, where)]
    triplets = get(record, "triplets", list, where)
    return [(raw, where.at(f"triplets[{k}]")) for k, raw in enumerate(triplets)]


def _episode(record: object, where: Where, episode_id: str, split: str, labels: set[str] | None,
             result: LoadResult) -> Episode | None:
    turns: dict[tuple[str, ...], Turn] = {}
    for raw, twhere in _triplets(record, where):
        with result.dropping("bad_triplet"):
            tokens = get(raw, "tokens", list, twhere)
            for i, token in enumerate(tokens):
                check(token, str, twhere, f"tokens[{i}]")
            if not tokens:
                raise twhere.error("empty token list", field="tokens")
            label = get(raw, "label", str, twhere)
            head = _span(tokens, get(raw, "head", list, twhere), twhere, "head")
            tail = _span(tokens, get(raw, "tail", list, twhere), twhere, "tail")
            triplet = build(Triplet, twhere, subject=head, relation=RELATION_FIXES.get(label, label), object=tail)
            if label in RELATION_FIXES:
                result.flag("relation_respelled", twhere.example(f"label {label!r} read as {triplet.relation!r}"))
            if labels is not None and triplet.relation not in labels:
                result.flag("relation_not_in_schema", twhere.example(f"label {label!r} not in {SCHEMA_FILE}"))
            key = tuple(tokens)
            if key not in turns:
                turns[key] = build(Turn, twhere, id=f"t{len(turns)}", speaker=SPEAKER, text=" ".join(tokens))
            turns[key].triplets.append(triplet)
    if not turns:
        result.drop("empty_record", where.example("no utterance with valid tokens"))
        return None
    session = Session(id="s1", index=0, turns=list(turns.values()))
    return build(Episode, where, id=episode_id, source="personaext", main_speaker=SPEAKER,
                 speakers=[Speaker(name=SPEAKER)], sessions=[session], split=split)
