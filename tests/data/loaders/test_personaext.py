"""pipelines/data/loaders/personaext.py on its two published shapes.

``fixtures/personaext``: PAED's split-file shape (``train.jsonl``, one utterance's ``triplets`` a line) with a
list ``schema.json``. Record 1: two triplets over one utterance and one over another (two turns); record 2: a
label schema.json does not list; record 3: a tail position outside the tokens; record 4: no triplet at all.

``fixtures/personaext_pairs``: the pairs file's shape (one ``{tokens, head, tail, label}`` a line) with PAED's
nested ``schema.json`` as published (not valid JSON: a trailing comma, a missing comma). Lines: a plain pair; a
span with a gap ("blue shoes"); the misspelt ``have_chidren`` and its correct spelling; a label the schema lacks;
a tail position outside the tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.data.loaders.personaext import relation_labels
from pipelines.errors import DataError

FOLDER = Path(__file__).parent / "fixtures" / "personaext"
PAIRS = Path(__file__).parent / "fixtures" / "personaext_pairs"


@pytest.fixture(scope="module")
def result():
    return get_loader("personaext")(FOLDER)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 2, "sessions": 2, "turns": 3, "memories": 0, "queries": 0, "triplets": 4}
    # record 3's one triplet is malformed: its utterance goes with it (kept, it would read as fact-free)
    assert dict(result.dropped) == {"bad_triplet": 1, "empty_record": 2}
    assert result.examples["bad_triplet"] == [
        f"file {FOLDER / 'train.jsonl'}, record line 3 triplets[0], field 'tail': position 9 outside the 5 tokens"]
    # a label the schema lacks is kept (the utterance states a fact) and flagged
    assert dict(result.flagged) == {"relation_not_in_schema": 1}
    assert result.examples["relation_not_in_schema"] == [
        f"{FOLDER / 'train.jsonl'} line 2 triplets[0]: label 'live_in_city' not in schema.json"]


def test_turns_and_triplets(result):
    ep = result.episodes[0]
    assert (ep.id, ep.source, ep.split) == ("train:1", "personaext", "train")
    first, second = ep.sessions[0].turns
    assert first.text == "i am a nurse and i love cats ."
    assert [(t.subject, t.relation, t.object) for t in first.triplets] == [
        ("i", "has_profession", "nurse"), ("i", "like_animal", "cats")]
    assert [(t.subject, t.relation, t.object) for t in second.triplets] == [("i", "want_job", "a chef")]
    assert second.triplets[0].serialise() == "i want job a chef"
    assert [t.text for t in result.episodes[1].sessions[0].turns] == ["i live in new york ."]
    assert [(t.subject, t.relation, t.object) for t in result.episodes[1].sessions[0].turns[0].triplets] == [
        ("i", "live_in_city", "new york")]


def test_schema_forms(tmp_path):
    assert relation_labels(FOLDER) == {"has_profession", "want_job", "like_animal", "live_in_citystatecountry"}
    assert relation_labels(FOLDER / "train.jsonl") == relation_labels(FOLDER)
    (tmp_path / "schema.json").write_text(json.dumps({"relations": ["a", "b"]}))
    assert relation_labels(tmp_path) == {"a", "b"}
    (tmp_path / "schema.json").write_text(json.dumps({"a": 0, "b": 1}))
    assert relation_labels(tmp_path) == {"a", "b"}
    (tmp_path / "schema.json").write_text(json.dumps([1, 2]))
    with pytest.raises(DataError, match="expected string"):
        relation_labels(tmp_path)


def test_without_schema_labels_are_not_checked(tmp_path):
    shutil.copy(FOLDER / "train.jsonl", tmp_path / "train.jsonl")
    r = get_loader("personaext")(tmp_path)
    assert r.counts()["triplets"] == 4
    assert dict(r.dropped) == {"bad_triplet": 1, "empty_record": 2}
    assert dict(r.flagged) == {}


def test_record_of_neither_shape_stops_the_load(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"text": "hi"}\n')
    with pytest.raises(DataError) as info:
        get_loader("personaext")(tmp_path)
    assert (info.value.record, info.value.field) == ("line 1", "triplets")


def test_a_pair_missing_a_field_is_dropped(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"tokens": ["hi"]}\n{"tokens": ["i", "run"], "head": [0], "tail": [1], '
                                         '"label": "like_activity"}\n')
    r = get_loader("personaext")(tmp_path)
    assert dict(r.dropped) == {"bad_triplet": 1, "empty_record": 1}
    assert r.examples["bad_triplet"] == [f"file {tmp_path / 'test.jsonl'}, record line 1, field 'label': "
                                         "missing required field"]
    assert [(t.subject, t.relation, t.object) for t in r.episodes[0].sessions[0].turns[0].triplets] == [
        ("i", "like_activity", "run")]


def test_pairs_file_as_published():
    """One pair a line, spans with gaps, PAED's schema.json as published (read as Hjson), the respelt label."""
    r = get_loader("personaext")(PAIRS)
    c = r.counts()
    assert {k: c[k] for k in ("episodes", "turns", "triplets")} == {"episodes": 5, "turns": 5, "triplets": 5}
    assert [(e.id, e.split) for e in r.episodes][:2] == [("personaext_pairs:1", "train"),
                                                         ("personaext_pairs:2", "train")]
    triplets = [(t.subject, t.relation, t.object) for e in r.episodes for _, turn in e.turns() for t in turn.triplets]
    assert triplets == [("i", "like_animal", "cats"), ("i", "own", "blue shoes"), ("i", "have_children", "two kids"),
                        ("my", "have_children", "son"), ("i", "pre_employed_by_company", "ford")]
    assert r.episodes[1].sessions[0].turns[0].text == "a classic . i like blue suede shoes ."
    assert dict(r.dropped) == {"bad_triplet": 1, "empty_record": 1}
    assert dict(r.flagged) == {"schema_json_repaired": 1, "relation_respelled": 1, "relation_not_in_schema": 1}
    assert r.examples["relation_not_in_schema"] == [
        f"{PAIRS / 'personaext_pairs.jsonl'} line 5: label 'pre_employed_by_company' not in schema.json"]
    assert relation_labels(PAIRS) == {"like_animal", "own", "have_pet", "have_children"}
    assert relation_labels(PAIRS / "personaext_pairs.jsonl") == relation_labels(PAIRS)


def test_a_schema_that_no_lenient_reading_parses_names_the_file(tmp_path):
    shutil.copy(PAIRS / "personaext_pairs.jsonl", tmp_path)
    (tmp_path / "schema.json").write_text('{"relation_types": [{"types": [')
    with pytest.raises(DataError) as info:
        get_loader("personaext")(tmp_path)
    assert info.value.file == str(tmp_path / "schema.json") and "JSON" in str(info.value)
