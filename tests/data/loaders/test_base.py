"""pipelines/data/loaders/base.py (shared readers and field checks) and the registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipelines.data import loaders
from pipelines.data.loaders import LOADERS, get_loader, register
from pipelines.data.loaders.base import (BLANK_TURN, DROP_KINDS, MAX_EXAMPLES, LoadResult, Where, build, get,
                                         iter_jsonl, iter_records, load_json, split_from_name, stream_json_array)
from pipelines.data.schema import Turn
from pipelines.errors import ConfigError, DataError

W = Where("f.json", "item 3")


def test_registry():
    assert sorted(LOADERS) == ["canonical", "cc", "convai2", "locomo", "longmemeval", "misc", "msc",
                               "personaext", "realmem"]
    assert get_loader("locomo") is LOADERS["locomo"]
    with pytest.raises(ConfigError, match="unknown source 'nope'; known sources: canonical, cc"):
        get_loader("nope")
    with pytest.raises(ValueError, match="registered twice"):
        register("locomo")(lambda path: LoadResult())


@pytest.mark.parametrize("obj, key, types, message, field", [
    ({"a": 1}, "b", int, "missing required field", "b"),
    ({"a": None}, "a", int, "missing required field", "a"),
    ({"a": "1"}, "a", int, "expected integer, got string", "a"),
    ({"a": True}, "a", int, "expected integer, got boolean", "a"),
    ({"a": 1.5}, "a", (str, int), "expected string or integer, got number", "a"),
    ([1, 2], "a", int, "expected a JSON object holding 'a', got array", "a"),
])
def test_get_errors(obj, key, types, message, field):
    with pytest.raises(DataError) as info:
        get(obj, key, types, W)
    assert (info.value.file, info.value.record, info.value.field) == ("f.json", "item 3", field)
    assert str(info.value) == f"file f.json, record item 3, field '{field}': {message}"


def test_get_values():
    assert get({"a": True}, "a", bool, W) is True
    assert get({"a": 2}, "a", (str, int), W) == 2
    assert get({}, "a", int, W, required=False, default=7) == 7


def test_build_turns_validation_into_data_error():
    assert build(Turn, W, id="t1", speaker="A", text="hi").id == "t1"
    with pytest.raises(DataError) as info:
        build(Turn, W, id=" ", speaker="A", text="hi")
    assert (info.value.record, info.value.field) == ("item 3", "id")


def test_drop_flag_and_examples():
    r = LoadResult()
    for i in range(MAX_EXAMPLES + 2):
        r.drop("bad_turn", f"ex {i}")
    r.drop("bad_qa", "q", n=3)
    r.flag("odd", "o")
    with r.dropping("bad_memory"):
        raise W.error("boom", field="text")
    assert dict(r.dropped) == {"bad_turn": MAX_EXAMPLES + 2, "bad_qa": 3, "bad_memory": 1}
    assert r.examples["bad_turn"] == [f"ex {i}" for i in range(MAX_EXAMPLES)]
    assert r.examples["bad_memory"] == ["file f.json, record item 3, field 'text': boom"]
    assert r.counts() == {"episodes": 0, "sessions": 0, "turns": 0, "memories": 0, "queries": 0,
                          "triplets": 0, "dropped": {"bad_memory": 1, "bad_qa": 3, "bad_turn": MAX_EXAMPLES + 2},
                          "flagged": {"odd": 1},
                          "examples": {"bad_memory": ["file f.json, record item 3, field 'text': boom"],
                                       "bad_qa": ["q"], "bad_turn": [f"ex {i}" for i in range(MAX_EXAMPLES)],
                                       "odd": ["o"]}}
    assert r.lost() == {"memories": 1, "queries": 3, "turns": MAX_EXAMPLES + 2}


def test_every_drop_reason_is_declared_with_its_kind():
    """The loss policy weighs drops by the kind of record they leave out: an undeclared reason is refused,
    and every reason a loader names in its source is declared."""
    with pytest.raises(ValueError, match="'bad_thing' is not declared in DROP_KINDS"):
        LoadResult().drop("bad_thing", "x")
    named = set()
    for module in Path(loaders.__file__).parent.glob("*.py"):
        named |= set(re.findall(r"\.drop(?:ping)?\(\s*\"([a-z_]+)\"", module.read_text(encoding="utf-8")))
    assert named and named <= set(DROP_KINDS), sorted(named - set(DROP_KINDS))
    assert {"bad_turn", "bad_qa", "bad_query"} <= named and DROP_KINDS[BLANK_TURN] == "turns"


@pytest.mark.parametrize("name, split", [
    ("train.jsonl", "train"), ("val.jsonl", "valid"), ("valid_self_original.txt", "valid"),
    ("msc_validation.json", "valid"), ("test.txt", "test"), ("longmemeval_s.json", "x"),
    ("contest.jsonl", "x"),
])
def test_split_from_name(name, split):
    assert split_from_name(name, "x") == split


def test_readers(tmp_path):
    jl = tmp_path / "a.jsonl"
    jl.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert list(iter_jsonl(jl)) == [(1, {"a": 1}), (3, {"a": 2})]
    assert list(iter_records(jl)) == [("line 1", {"a": 1}), ("line 3", {"a": 2})]
    arr = tmp_path / "a.json"
    arr.write_text(json.dumps([{"a": 1}, {"a": 2.5}]))
    assert list(iter_records(arr)) == [("item 0", {"a": 1}), ("item 1", {"a": 2.5})]
    assert list(stream_json_array(arr)) == [(0, {"a": 1}), (1, {"a": 2.5})]
    jl.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(DataError) as info:
        list(iter_jsonl(jl))
    assert info.value.record == "line 2"
    arr.write_text('[{"a": 1}, {"a": 2} ]  x')
    with pytest.raises(DataError, match="invalid JSON") as info:
        list(stream_json_array(arr))
    assert info.value.record.startswith("item 2 ")
    with pytest.raises(DataError, match="invalid JSON") as info:
        load_json(arr)
    assert info.value.record == "line 1 column 24 (char 23)"
    with pytest.raises(DataError, match="file does not exist"):
        load_json(tmp_path / "missing.json")
