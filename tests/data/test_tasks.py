"""(P, H, Q, R) examples from canonical episodes (pipelines/data/tasks.py)."""

import json

import pytest

from pipelines.data.schema import Episode, Memory, Session, Speaker, Turn
from pipelines.data.synthetic import SyntheticConfig, generate
from pipelines.data.tasks import (MDRExample, build_mdr_examples, episode_examples, read_mdr_examples,
                                  write_mdr_examples)
from pipelines.errors import DataError


def _turns(prefix, spec):
    return [Turn(id=f"{prefix}:t{i + 1}", speaker=who, text=text) for i, (who, text) in enumerate(spec)]


def convai2_episode():
    """One session of alternating partner/bot turns, the bot has the persona ("your persona")."""
    return Episode(id="c1", source="convai2", main_speaker="bot", split="valid",
                   speakers=[Speaker(name="bot", persona=["i like cats.", "i am a chef."]), Speaker(name="partner")],
                   sessions=[Session(id="c1:s1", index=0, turns=_turns("c1", [
                       ("partner", "hi!"), ("bot", "hello, i cook."),
                       ("partner", "nice. pets?"), ("bot", "two cats."),
                       ("partner", "cool"), ("bot", "and you?")]))])


def msc_episode():
    """Two sessions; session 2 opens with the main speaker, has two partner turns in a row and two
    main-speaker turns in a row."""
    return Episode(id="m1", source="msc", main_speaker="A",
                   speakers=[Speaker(name="A", persona=["i run."]), Speaker(name="B")],
                   sessions=[
                       Session(id="m1:s1", index=0, turns=_turns("m1:s1", [("B", "q1"), ("A", "r1"), ("B", "q2"), ("A", "r2")])),
                       Session(id="m1:s2", index=1, turns=_turns("m1:s2", [
                           ("A", "opening"), ("B", "q3a"), ("B", "q3b"), ("A", "r3"), ("A", "r3 again"),
                           ("B", "q4"), ("A", "r4")]))])


def test_convai2_rounds():
    ex = episode_examples(convai2_episode())
    assert [(e.query, e.response) for e in ex] == [("hi!", "hello, i cook."), ("nice. pets?", "two cats."),
                                                   ("cool", "and you?")]
    assert [e.history for e in ex] == [[], [("hi!", "hello, i cook.")],
                                       [("hi!", "hello, i cook."), ("nice. pets?", "two cats.")]]
    assert all(e.persona == ["i like cats.", "i am a chef."] for e in ex)
    assert ex[2].id == "c1/c1:t6" and ex[2].query_turn_id == "c1:t5" and ex[2].split == "valid"
    assert ex[2].history_turn_ids == ["c1:t2", "c1:t4"]
    assert ex[0].session_id == "c1:s1"


def test_multi_session_history_and_irregular_turns():
    ex = episode_examples(msc_episode())
    # "opening" has no query; "q3b" is the partner's last utterance; "r3 again" follows A itself
    assert [(e.query, e.response) for e in ex] == [("q1", "r1"), ("q2", "r2"), ("q3b", "r3"), ("q4", "r4")]
    assert ex[3].history == [("q1", "r1"), ("q2", "r2"), ("q3b", "r3")]
    assert ex[2].session_id == "m1:s2"
    cut = episode_examples(msc_episode(), max_history_rounds=2)
    assert cut[3].history == [("q2", "r2"), ("q3b", "r3")] and cut[1].history == [("q1", "r1")]
    assert episode_examples(msc_episode(), max_history_rounds=0)[3].history == []
    with pytest.raises(ValueError, match="max_history_rounds"):
        episode_examples(msc_episode(), max_history_rounds=-1)


def test_empty_persona_falls_back_to_own_memories_of_earlier_sessions():
    s1 = Session(id="x:s1", index=0, turns=_turns("x:s1", [("P", "q1"), ("M", "r1")]), memories=[
        Memory(id="m1", owner="M", about="M", text="M is a pilot.", session_id="x:s1"),
        Memory(id="m2", owner="M", about="P", text="P likes tea.", session_id="x:s1"),
        Memory(id="m3", owner="P", about="M", text="M flies.", session_id="x:s1")])
    s2 = Session(id="x:s2", index=1, turns=_turns("x:s2", [("P", "q2"), ("M", "r2")]), memories=[
        Memory(id="m4", owner="M", about="M", text="M moved.", session_id="x:s2")])
    episode = Episode(id="x", source="synthetic", main_speaker="M",
                      speakers=[Speaker(name="M"), Speaker(name="P")], sessions=[s1, s2])
    ex = episode_examples(episode)
    assert [e.persona for e in ex] == [[], ["M is a pilot."]]
    assert [e.persona for e in episode_examples(episode, memory_persona=False)] == [[], []]


def test_synthetic_episodes():
    episodes = generate(SyntheticConfig(episodes=3, sessions=2, turns=6))
    ex = build_mdr_examples(episodes)
    # the main speaker opens each session: rounds (T2, T3) and (T4, T5) -> 2 per session, 4 per episode
    assert len(ex) == 12
    first = episodes[0]
    s1 = first.sessions[0].turns
    assert (ex[0].query, ex[0].response, ex[0].turn_id) == (s1[1].text, s1[2].text, s1[2].id)
    main = next(s for s in first.speakers if s.name == first.main_speaker)
    assert ex[0].persona == main.persona
    assert ex[3].history == [(s1[1].text, s1[2].text), (s1[3].text, s1[4].text),
                             (first.sessions[1].turns[1].text, first.sessions[1].turns[2].text)]
    train = build_mdr_examples(episodes, split="train")
    assert {e.split for e in train} == {"train"} and len(train) == 4 * sum(e.split == "train" for e in episodes)


def test_bad_episodes_raise_data_errors():
    episode = convai2_episode()
    episode.main_speaker = "nobody"
    with pytest.raises(DataError, match="main_speaker") as err:
        episode_examples(episode, source="convai2.jsonl")
    assert err.value.file == "convai2.jsonl" and err.value.record == "episode c1"
    episode = convai2_episode()
    episode.sessions[0].turns[2].text = "  "
    with pytest.raises(DataError) as err:
        episode_examples(episode)
    assert (err.value.record, err.value.field) == ("episode c1, turn c1:t3", "text")
    with pytest.raises(DataError, match="repeats"):
        build_mdr_examples([convai2_episode(), convai2_episode()])


def test_examples_file_round_trip(tmp_path):
    ex = build_mdr_examples([convai2_episode(), msc_episode()])
    path = tmp_path / "mdr" / "examples.jsonl"
    assert write_mdr_examples(path, ex) == 7
    assert read_mdr_examples(path) == ex


@pytest.mark.parametrize("line, field", [
    ({"query": "q"}, "persona"),
    ({**MDRExample([], [], "q", "r", "e", "s", "t").to_json(), "history": [["only one"]]}, "history.0"),
    ({**MDRExample([], [], "q", "r", "e", "s", "t").to_json(), "response": " "}, "response"),
    ({**MDRExample([], [], "q", "r", "e", "s", "t").to_json(), "query": 3}, "query"),
    ({**MDRExample([], [], "q", "r", "e", "s", "t").to_json(), "extra": 1}, "extra"),
])
def test_bad_example_lines_name_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"schema": "mnemos.mdr_examples", "version": 1}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(DataError) as err:
        read_mdr_examples(path)
    assert (err.value.file, err.value.record, err.value.field) == (str(path), "line 2", field)


def test_bad_examples_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_mdr_examples(tmp_path / "none.jsonl")
    path = tmp_path / "x.jsonl"
    path.write_text('{"schema": "other"}\n')
    with pytest.raises(DataError, match="header"):
        read_mdr_examples(path)
    path.write_text('{"schema": "mnemos.mdr_examples", "version": 1}\n{not json\n')
    with pytest.raises(DataError, match="invalid JSON"):
        read_mdr_examples(path)
