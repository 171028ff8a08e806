from datetime import datetime

import pytest

from pipelines.data.schema import Episode, Session, Turn
from pipelines.errors import ConfigError
from pipelines.memory import STRATEGIES, Retrieved, Selector, StrategyConfig, TokenCounter, build_strategy
from pipelines.memory.base import names, pack_context, register_strategy, render_line, session_participants
from pipelines.memory.bm25 import BM25, BM25Config


def test_registry_holds_every_strategy():
    assert {"no_history", "long_context", "bm25", "dense", "session_summary"} <= set(STRATEGIES)
    assert STRATEGIES["bm25"] is BM25 and BM25.name == "bm25"


def test_build_strategy_passes_settings_to_the_typed_config():
    counter = TokenCounter()
    strategy = build_strategy("bm25", counter=counter, k1=1.2, context_k=3)
    assert strategy.config == BM25Config(k1=1.2, context_k=3)
    assert strategy.counter is counter


def test_build_strategy_rejects_unknown_names_and_settings():
    with pytest.raises(ConfigError, match="'nope' is unknown"):
        build_strategy("nope")
    with pytest.raises(ConfigError, match=r"no setting\(s\) \['kone'\]"):
        build_strategy("bm25", kone=1.0)


def test_registering_a_second_class_under_a_taken_name_fails():
    with pytest.raises(ValueError, match="registered twice"):
        register_strategy("bm25")(type("Other", (BM25,), {}))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_context_k_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="context_k"):
        StrategyConfig(context_k=bad)


def test_selector_matches_any_named_id_and_refuses_to_be_empty():
    sel = Selector.of(turns=["t1"], speakers=["Ben"])
    assert sel.matches(turn_id="t1")
    assert sel.matches(turn_id="t9", speakers=("Ben",))
    assert not sel.matches(turn_id="t9", session_id="s1", speakers=("Ana", None))
    assert isinstance(sel.turn_ids, frozenset)
    with pytest.raises(ValueError, match="at least one"):
        Selector()


@pytest.mark.parametrize("text, name, named", [
    ("Since Wren's violin...", "Wren", True),        # possessive
    ("wren plays", "Wren", True),                    # any case
    ("Hi WREN!", "wren", True),
    ("Pass me a wrench.", "Wren", False),            # a word, not a substring
    ("Since you play the violin", "Wren", False),
    ("Ana  Lima called", "Ana Lima", True),          # a two-word name, any whitespace between
    ("Ana called Lima", "Ana Lima", False),
    ("user: the User said", "user", True),
    ("anything", "  ", False),                       # a blank name names nothing
])
def test_names_matches_a_whole_name_case_insensitively(text, name, named):
    assert names(text, name) is named


def test_session_participants_are_main_speaker_partner_and_every_speaker():
    session = Session(id="s", index=0, partner="Wren", turns=[
        Turn(id="t1", speaker="Juno", text="Hi."), Turn(id="t2", speaker="Vivek", text="Hello.")])
    episode = Episode(id="e", source="t", main_speaker="Juno", sessions=[session])
    assert session_participants(episode, session) == {"Juno", "Wren", "Vivek"}
    alone = Session(id="s2", index=1, turns=[Turn(id="t3", speaker="Juno", text="Notes to self.")])
    assert session_participants(episode, alone) == {"Juno"}


@pytest.mark.parametrize("item, about", [
    (dict(speakers=("Wren",)), True),                                 # said by Wren (or owned by, about Wren)
    (dict(speakers=(" wren ",)), True),                               # names compare case- and space-folded
    (dict(speakers=("Juno", None), participants={"Juno", "Wren"}), True),  # said to Wren, in a session with her
    (dict(speakers=("Juno",), participants={"Juno", "Vivek"}, text="Wren plays the violin."), True),  # names her
    (dict(speakers=("Juno",), participants={"Juno", "Vivek"}, text="Since you play the violin"), False),
    (dict(speakers=(None,), text="A wrench."), False),
])
def test_about_is_said_by_said_to_or_naming_the_speaker(item, about):
    assert Selector.of(speakers=["Wren"]).about(**item) is about
    assert Selector.of(sessions=["s"]).about(**item) is False          # no speaker selected: about no one


def test_matches_reaches_what_was_made_from_a_selected_turn():
    sel = Selector.of(turns=["t2"])
    assert sel.matches(turns=["t1", "t2"])                 # a summary / memory of the turn's session
    assert not sel.matches(turns=["t1"], speakers=("Wren",))
    assert Selector.of(speakers=["Wren"]).scrub({"Juno", "wren", "Vivek"}) == {"Juno", "Vivek"}


def _item(order, text, speaker="Ana", when=datetime(2023, 3, 1)):
    return Retrieved(score=0.0, text=text, speaker=speaker, timestamp=when, order=order)


def test_render_line_with_and_without_date_and_speaker():
    assert render_line(_item(0, "Hi.")) == "[2023-03-01] Ana: Hi."
    assert render_line(_item(0, "Hi."), include_dates=False) == "Ana: Hi."
    assert render_line(Retrieved(score=0.0, text="A summary.")) == "A summary."


def test_pack_context_stops_at_the_first_item_that_does_not_fit_and_writes_chronologically():
    counter = TokenCounter()
    # priority order: newest (order 2) first; line costs 6, 6 and 8 tokens without dates
    items = [_item(2, "c c c c", "Ana"), _item(1, "b b b b", "Ben"), _item(0, "a a a a a a", "Ana")]
    assert pack_context(items, 12, counter, include_dates=False) == "Ben: b b b b\nAna: c c c c"
    assert pack_context(items, 19, counter, include_dates=False) == "Ben: b b b b\nAna: c c c c"
    assert pack_context(items, 20, counter, include_dates=False) == "Ana: a a a a a a\nBen: b b b b\nAna: c c c c"
    assert pack_context(items, 5, counter, include_dates=False) == ""
    # a short item after one that did not fit is not packed (the context is a prefix of the priority)
    assert pack_context([items[2], items[0]], 7, counter, include_dates=False) == ""
    with pytest.raises(ValueError):
        pack_context(items, -1, counter)


def test_retrieved_built_is_the_dataclass_item_and_stays_frozen():
    import dataclasses
    import inspect

    when = datetime(2023, 5, 1)
    fast = Retrieved.built(0.5, "I adopted a cat.", "s1", "t3", None, "Wren", when, 7)
    assert fast == Retrieved(score=0.5, text="I adopted a cat.", session_id="s1", turn_id="t3", speaker="Wren",
                             timestamp=when, order=7)
    assert Retrieved.built(1.0, "x") == Retrieved(score=1.0, text="x")          # the dataclass's defaults
    assert hash(fast) == hash(dataclasses.replace(fast))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.score = 2.0
    # built takes every field, in the dataclass's order and with its defaults
    params = list(inspect.signature(Retrieved.built).parameters.values())
    assert [(p.name, p.default) for p in params] == [
        (f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(Retrieved)]
