"""Property: random corruptions of every loader's fixture raise nothing but DataError.

A corruption is one of: truncate the file; flip a byte; insert invalid UTF-8; delete a
line; and, for JSON formats, delete a key (or list item) anywhere in the tree or
replace any value with a value of another type. The loader must either succeed (the
damage was droppable, and is counted) or raise ``pipelines.errors.DataError``; any
other exception (KeyError, TypeError, ValidationError, ...) fails the property.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.data.loaders import LoadResult, get_loader
from pipelines.data.schema import write_episodes
from pipelines.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"

# loader -> (what the loader is pointed at, the file in it that gets corrupted, its format)
CASES = {
    "locomo": ("locomo10_fixture.json", "locomo10_fixture.json", "json"),
    "longmemeval": ("longmemeval_s_fixture.json", "longmemeval_s_fixture.json", "json"),
    "realmem": ("realmem", "Ana_Lima_dialogues_256k.json", "json"),
    "convai2": ("convai2", "valid_self_original.txt", "text"),
    "cc": ("cc", "test.jsonl", "jsonl"),
    "msc": ("msc", "valid.txt", "jsonl"),
    "misc": ("misc", "val.jsonl", "jsonl"),
    "personaext": ("personaext", "train.jsonl", "jsonl"),
    "canonical": ("canonical", "test.jsonl", "jsonl"),
}
OTHER_VALUES = [None, 0, -1, 7, True, 1.5, "", "x", "D1:1", [], {}, [1], ["x"], {"a": None}]
BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82"]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Path:
    """The fixture folder plus a canonical file written from the LoCoMo fixture."""
    root = tmp_path_factory.mktemp("fixtures")
    shutil.copytree(FIXTURES, root, dirs_exist_ok=True)
    episodes = get_loader("locomo")(FIXTURES / "locomo10_fixture.json").episodes
    write_episodes(root / "canonical" / "test.jsonl", episodes)
    return root


def _paths(node, prefix=()):
    """Every (path to a child) in a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        yield prefix + (key,)
        yield from _paths(child, prefix + (key,))


def _corrupt_tree(tree, data: st.DataObject):
    paths = list(_paths(tree))
    if not paths:
        return data.draw(st.sampled_from(OTHER_VALUES))
    path = data.draw(st.sampled_from(paths))
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(st.sampled_from(OTHER_VALUES))
    return tree


def _corrupt(raw: bytes, fmt: str, data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["truncate", "flip", "utf8", "delete_line", "tree"]))
    if kind == "tree" and fmt == "text":
        kind = "delete_line"
    if kind == "truncate":
        return raw[: data.draw(st.integers(0, len(raw) - 1))]
    if kind == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        return raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1:]
    if kind == "utf8":
        i = data.draw(st.integers(0, len(raw)))
        return raw[:i] + data.draw(st.sampled_from(BAD_UTF8)) + raw[i:]
    lines = raw.split(b"\n")
    if kind == "delete_line":
        del lines[data.draw(st.integers(0, len(lines) - 1))]
        return b"\n".join(lines)
    if fmt == "json":
        return json.dumps(_corrupt_tree(json.loads(raw), data)).encode()
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    i = data.draw(st.sampled_from(candidates))
    lines[i] = json.dumps(_corrupt_tree(json.loads(lines[i]), data)).encode()
    return b"\n".join(lines)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corruptions_raise_only_data_error(fixtures, name, data):
    target, victim, fmt = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        src = fixtures / target
        dst = Path(tmp) / target
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
        file = dst / victim if src.is_dir() else dst
        file.write_bytes(_corrupt(file.read_bytes(), fmt, data))
        try:
            result = get_loader(name)(dst)
        except DataError as exc:
            assert exc.file is not None, f"DataError without a file: {exc}"
        else:
            assert isinstance(result, LoadResult)
            result.counts()
