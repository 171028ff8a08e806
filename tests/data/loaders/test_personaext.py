"""pipelines/data/loaders/personaext.py on a hand-written ``train.jsonl`` + ``schema.json``.

Record 1: two triplets over one utterance and one over another (two turns); record 2:
a label schema.json does not list; record 3: a tail position outside the tokens;
record 4: no triplet at all.
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


@pytest.fixture(scope="module")
def result():
    return get_loader("personaext")(FOLDER)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 3, "sessions": 3, "turns": 4, "memories": 0, "queries": 0, "triplets": 3}
    assert dict(result.dropped) == {"bad_triplet": 1, "empty_record": 1, "unknown_relation": 1}
    assert result.examples["bad_triplet"] == [
        f"file {FOLDER / 'train.jsonl'}, record line 3 triplets[0], field 'tail': position 9 outside the 5 tokens"]


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
    assert result.episodes[1].sessions[0].turns[0].triplets == []


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
    assert dict(r.dropped) == {"bad_triplet": 1, "empty_record": 1}


def test_record_without_triplets_field(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"tokens": ["hi"]}\n')
    with pytest.raises(DataError) as info:
        get_loader("personaext")(tmp_path)
    assert (info.value.record, info.value.field) == ("line 1", "triplets")
