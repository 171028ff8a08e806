"""pipelines/data/loaders/convai2.py on two hand-written ParlAI text files.

``valid_self_original.txt`` has candidates (an empty reward field, then ``|``-separated
candidates), a ``__SILENCE__`` partner turn and a line without a response;
``train_both_original_no_cands.txt`` has "partner's persona" lines and a numbering gap.
Ordinary turns pad the fixture so that its deliberate drops stay under the default loss limit (5% of the
turns read, ``pipelines.validate.load``), as in the published files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.errors import DataError

FOLDER = Path(__file__).parent / "fixtures" / "convai2"


@pytest.fixture(scope="module")
def result():
    return get_loader("convai2")(FOLDER)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 4, "sessions": 4, "turns": 24, "memories": 0, "queries": 0, "triplets": 0}
    assert dict(result.dropped) == {"line_number_gap": 1, "missing_response": 1, "silence_placeholder": 1}
    assert result.examples["line_number_gap"] == [
        f"{FOLDER / 'train_both_original_no_cands.txt'} line 5: number 6 after 4"]


def test_both_variant_with_partner_persona(result):
    ep = result.episodes[0]  # files are read in name order: train_ before valid_
    assert (ep.id, ep.split, ep.main_speaker) == ("train_both_original_no_cands:0", "train", "self")
    assert [(s.name, s.persona) for s in ep.speakers] == [
        ("self", ["i play the violin."]), ("partner", ["i am a chef.", "i live in rome."])]
    assert [(t.id, t.speaker) for t in ep.sessions[0].turns] == [
        ("4q", "partner"), ("4r", "self"), ("5q", "partner"), ("5r", "self")]


def test_candidates_variant(result):
    first, second = result.episodes[1:3]
    assert (first.id, first.split) == ("valid_self_original:0", "valid")
    assert first.speakers[0].persona == ["i love hiking.", "i have two dogs."]
    assert first.speakers[1].persona == []
    assert [t.text for t in first.sessions[0].turns] == [
        "hi , how are you ?", "i am great , just walked my dogs .",
        "what breed are they ?", "two beagles , they love the hills ."]
    assert [(t.id, t.speaker, t.text) for t in second.sessions[0].turns] == [
        ("6r", "self", "hello , anyone there ?"), ("7q", "partner", "i work nights at the hospital .")]
    assert (second.sessions[0].id, second.sessions[0].partner) == ("session_1", "partner")


def test_line_without_number_is_an_error(tmp_path):
    bad = tmp_path / "test_self_original.txt"
    bad.write_text("1 your persona: i sing.\nhello there\tok\n")
    with pytest.raises(DataError) as info:
        get_loader("convai2")(bad)
    assert (info.value.file, info.value.record) == (str(bad), "line 2")


def test_non_utf8(tmp_path):
    bad = tmp_path / "test_self_original.txt"
    bad.write_bytes(b"1 your persona: i sing.\n2 caf\xe9\tok\n")
    with pytest.raises(DataError, match="not UTF-8") as info:
        get_loader("convai2")(bad)
    assert info.value.record == "byte 29 (line 2)"  # 24 bytes of line 1, then "2 caf"
