"""Golden strings for EMMA's three task formats (Appendix E.1 of seed 000) on the hand-built episode."""

from __future__ import annotations

import pytest

from pipelines.data.schema import Memory, MemoryLink, Turn
from pipelines.data.synthetic import SyntheticConfig, generate
from pipelines.emma import formats as F
from pipelines.errors import ConfigError, DataError


def by_ref(examples, ref):
    [ex] = [e for e in examples if e.ref == ref]
    return ex


# --- generation ----------------------------------------------------------------------------------

def test_generation_golden_with_memory_and_link(episode):
    ex = by_ref(F.generation_examples(episode), "E1:S3:T2")
    assert ex.source == (
        "generation: [Mia] nurse [Leo] her brother "
        "[MEMORY] Leo is moving to Lisbon in May. (about Leo, from first session) "
        "[LINK] Mia plans to visit Leo in Lisbon. (about Mia, from second session) "
        "[NOW] third session [Leo] I finally moved to Lisbon! [Mia]")
    assert ex.target == "I know, and I am coming to visit you with Biscuit."
    assert (ex.task, ex.episode_id, ex.session_id) == ("generation", "E1", "E1:S3")


def test_generation_golden_memory_whose_link_is_written_later_has_no_link(episode):
    # S1:M1 is linked from S2:M1, but S2:M1 is only written at the end of session 2.
    ex = by_ref(F.generation_examples(episode), "E1:S2:T2")
    assert ex.source == (
        "generation: [Mia] nurse [Ana] coworker "
        "[MEMORY] Mia adopted a puppy. (about Mia, from first session) "
        "[NOW] second session [Ana] How is the new puppy doing? [Mia]")


def test_generation_golden_opening_turn_and_full_history(episode):
    examples = F.generation_examples(episode)
    assert [e.ref for e in examples] == ["E1:S1:T1", "E1:S1:T3", "E1:S2:T2", "E1:S2:T4", "E1:S3:T2"]
    assert by_ref(examples, "E1:S1:T1").source == "generation: [Mia] nurse [Leo] her brother [NOW] first session [Mia]"
    assert by_ref(examples, "E1:S1:T3").source == (
        "generation: [Mia] nurse [Leo] her brother [NOW] first session "
        "[Mia] Hi Leo, I adopted a puppy last week. [Leo] Congratulations! I am moving to Lisbon in May. [Mia]")


def test_generation_roles_and_no_provenance(episode):
    cfg = F.FormatConfig(turn_tags="roles", memory_provenance=False)
    ex = by_ref(F.generation_examples(episode, cfg), "E1:S3:T2")
    assert ex.source == (
        "generation: [Mia] nurse [Leo] her brother [MEMORY] Leo is moving to Lisbon in May. "
        "[LINK] Mia plans to visit Leo in Lisbon. [NOW] third session [USER] I finally moved to Lisbon! [BOT]")


def test_missing_job_is_left_out():
    inp = F.GenerationInput("Mia", None, "Leo", "her brother", 2, [("m", [])], [("Leo", "Hi.")])
    assert inp.render() == "generation: [Mia] [Leo] her brother [MEMORY] m [NOW] second session [Leo] Hi. [Mia]"
    assert inp.context() == "[Mia] [Leo] her brother [NOW] second session [Leo] Hi. [Mia]"


def test_fit_history_drops_oldest_turns_first():
    inp = F.GenerationInput("Mia", "nurse", "Leo", None, 1, [],
                            [("Leo", "one two three"), ("Mia", "four five"), ("Leo", "six")])
    words = lambda s: len(s.split())  # noqa: E731
    assert words(inp.render()) == 17
    assert F.fit_history(inp, words, 17).history == inp.history
    fitted = F.fit_history(inp, words, 14)
    assert fitted.history == [("Mia", "four five"), ("Leo", "six")]
    assert words(fitted.render()) == 13
    assert F.fit_history(inp, words, 12).history == [("Leo", "six")]
    assert F.fit_history(inp, words, 1).history == [("Leo", "six")]   # the latest turn always stays


def test_source_layout_finds_the_head_and_the_turn_starts(episode):
    """What an over-long input keeps (pipelines.emma.dialogue_encoding.encode_all): the head ends after the [NOW]
    marker; turns start at the space before each speaker tag; the closing [Mia] slot is no turn start."""
    ex = by_ref(F.generation_examples(episode), "E1:S1:T3")
    layout = F.source_layout(ex.source)
    assert ex.source[: layout.head_end] == "generation: [Mia] nurse [Leo] her brother [NOW] first session"
    assert [ex.source[c:] for c in layout.turn_starts] == [
        " [Mia] Hi Leo, I adopted a puppy last week. [Leo] Congratulations! I am moving to Lisbon in May. [Mia]",
        " [Leo] Congratulations! I am moving to Lisbon in May. [Mia]"]
    with_memory = by_ref(F.generation_examples(episode), "E1:S3:T2").source
    layout = F.source_layout(with_memory)
    assert with_memory[: layout.head_end].endswith("(about Mia, from second session) [NOW] third session")
    assert [with_memory[c:] for c in layout.turn_starts] == [" [Leo] I finally moved to Lisbon! [Mia]"]
    summary = F.summarize_examples(episode)[3].source
    layout = F.source_layout(summary)
    assert summary[: layout.head_end] == "summarize [ABOUT_Ana]: [Mia] nurse [Ana] coworker [NOW] second session"
    assert len(layout.turn_starts) == 4 and summary[layout.turn_starts[-1]:] == " [Mia] A little, but I will visit him."
    roles = by_ref(F.generation_examples(episode, F.FormatConfig(turn_tags="roles")), "E1:S1:T3").source
    assert [roles[c:c + 7] for c in F.source_layout(roles).turn_starts] == [" [BOT] ", " [USER]"]
    opening = by_ref(F.generation_examples(episode), "E1:S1:T1").source
    assert F.source_layout(opening) == F.SourceLayout(len(opening) - len(" [Mia]"), ())
    assert F.source_layout(F.link_source("a", "b")) is None and F.source_layout("positive") is None
    assert F.source_layout("generation: [Mia] hi") == F.SourceLayout(len("generation:"), ())   # no [NOW]: the prefix


# --- summarisation ---------------------------------------------------------------------------------

def test_summarize_golden(episode):
    examples = F.summarize_examples(episode)
    assert [e.ref for e in examples] == ["Mia", "Leo", "Mia", "Ana", "Mia", "Leo"]
    s2_final = ("[Mia] nurse [Ana] coworker [NOW] second session [Ana] How is the new puppy doing? "
                "[Mia] Biscuit is great, and my brother is moving to Lisbon soon. "
                "[Ana] You must be sad about your brother. [Mia] A little, but I will visit him.")
    about_mia, about_ana = examples[2], examples[3]
    assert about_mia.source == "summarize [ABOUT_Mia]: " + s2_final
    assert about_mia.target == "Mia named her puppy Biscuit. [SEP] Mia plans to visit Leo in Lisbon."
    assert about_ana.source == "summarize [ABOUT_Ana]: " + s2_final
    assert about_ana.target == "[NONE]"
    assert examples[5].target == "Leo moved to Lisbon."
    assert examples[4].target == "[NONE]"


def test_parse_summary_inverts_target():
    assert F.parse_summary("Mia named her puppy Biscuit. [SEP] Mia plans to visit Leo. ") == [
        "Mia named her puppy Biscuit.", "Mia plans to visit Leo."]
    assert F.parse_summary("[NONE]") == []
    assert F.summarize_target([]) == "[NONE]"


# --- linking ---------------------------------------------------------------------------------------

def test_link_golden_positive(episode):
    examples = F.link_examples(episode)
    ex = by_ref(examples, "E1:S1:M2>E1:S3:M1")
    assert ex.source == ("memory sentence 1: Leo is moving to Lisbon in May. (about Leo, from first session) "
                         "memory sentence 2: Leo moved to Lisbon. (about Leo, from third session)")
    assert ex.target == "positive"
    assert sorted(e.ref for e in examples if e.target == "positive") == [
        "E1:S1:M1>E1:S2:M1", "E1:S1:M2>E1:S2:M2", "E1:S1:M2>E1:S3:M1"]


def test_link_negatives_are_seeded_unlinked_candidates(episode):
    examples = F.link_examples(episode, F.FormatConfig(negatives_per_positive=2.0, seed=7))
    negatives = [e.ref for e in examples if e.target == "negative"]
    assert len(negatives) == 6                   # 2 x 3 gold links, out of 10 - 3 = 7 unlinked candidates
    view = F.EpisodeView(episode)
    unlinked = {f"{a}>{b}" for a, b in F.link_candidates(view)} - {
        "E1:S1:M1>E1:S2:M1", "E1:S1:M2>E1:S2:M2", "E1:S1:M2>E1:S3:M1"}
    assert len(unlinked) == 7 and set(negatives) <= unlinked
    again = F.link_examples(episode, F.FormatConfig(negatives_per_positive=2.0, seed=7))
    assert [e.ref for e in again] == [e.ref for e in examples]
    # every negative pair is (earlier, newer) in time order
    order = view.order
    assert all(order[r.split(">")[0]] < order[r.split(">")[1]] for r in negatives)
    # the negative for a pair is written like a positive one
    neg = next(e for e in examples if e.target == "negative")
    a, b = neg.ref.split(">")
    assert neg.source == f"memory sentence 1: {view.rendered(a)} memory sentence 2: {view.rendered(b)}"


def test_link_candidates_within_session_then_earlier(episode):
    """Section 4.1: a new memory is linked first within its own session, then to earlier sessions."""
    pairs = F.link_candidates(F.EpisodeView(episode))
    assert len(pairs) == 10
    assert [a for a, b in pairs if b == "E1:S2:M2"] == ["E1:S2:M1", "E1:S1:M1", "E1:S1:M2"]
    assert [a for a, b in pairs if b == "E1:S2:M1"] == ["E1:S1:M1", "E1:S1:M2"]      # nothing before it in S2
    assert [a for a, b in pairs if b == "E1:S3:M1"] == ["E1:S1:M1", "E1:S1:M2", "E1:S2:M1", "E1:S2:M2"]
    assert [b for _, b in pairs] == sorted((b for _, b in pairs), key=F.EpisodeView(episode).order.__getitem__)
    # the link examples ask in that order
    refs = [e.ref for e in F.link_examples(episode, F.FormatConfig(negatives_per_positive=10.0))]
    assert refs == [f"{a}>{b}" for a, b in pairs]


def test_parse_link():
    assert F.parse_link(" positive") and not F.parse_link("negative")


# --- whole datasets, configs, errors ---------------------------------------------------------------

def test_build_examples_on_synthetic_episodes():
    episodes = generate(SyntheticConfig(episodes=2, sessions=3, turns=6, partners=2, queries_per_session=1))
    examples = F.build_examples(episodes)
    for ep in episodes:
        mine = [e for e in examples if e.episode_id == ep.id]
        main_turns = sum(t.speaker == ep.main_speaker for _, t in ep.turns())
        gold = sum(len(s.links) for s in ep.sessions)
        assert sum(e.task == "generation" for e in mine) == main_turns
        assert sum(e.task == "summarize" for e in mine) == 2 * len(ep.sessions)
        assert sum(e.target == "positive" for e in mine) == gold
        assert all(e.source.startswith(("generation: ", "summarize [ABOUT_", "memory sentence 1: "))
                   for e in mine)


def test_build_examples_fits_generation_inputs_to_a_budget(episode):
    words = lambda s: len(s.split())  # noqa: E731
    full = by_ref(F.build_examples([episode], F.FormatConfig(tasks=("generation",))), "E1:S1:T3")
    assert words(full.source) == 28
    fitted = by_ref(F.build_examples([episode], F.FormatConfig(tasks=("generation",)), count_tokens=words,
                                     budget=20), "E1:S1:T3")
    assert fitted.source == ("generation: [Mia] nurse [Leo] her brother [NOW] first session "
                             "[Leo] Congratulations! I am moving to Lisbon in May. [Mia]")


def test_examples_round_trip(tmp_path, episode):
    examples = F.build_examples([episode])
    path = tmp_path / "emma.jsonl"
    assert F.write_examples(path, examples) == len(examples) == 5 + 6 + 6
    assert list(F.iter_examples(path)) == examples
    path.write_text(f'{{"schema": "{F.EXAMPLES_SCHEMA}", "version": {F.EXAMPLES_VERSION}}}\n'
                    '{"task": "chat", "source": "x", "target": "y", "episode_id": "E", "session_id": "S"}\n')
    with pytest.raises(DataError, match=r"record line 2, field 'task'"):
        list(F.iter_examples(path))


def test_tag_written_in_same_session_is_rejected(episode):
    episode.sessions[1].turns[1].memory_tags = ["E1:S2:M1"]
    with pytest.raises(DataError, match=r"episode E1, session E1:S2, field 'memory_tags', "
                                        r"rule 'memory_tag_from_earlier_session'"):
        F.generation_examples(episode, file="misc/test.jsonl")


def test_unknown_tag_and_link_are_rejected(episode):
    episode.sessions[2].links.append(MemoryLink(from_id="E1:S3:M1", to_id="E1:S9:M9"))
    with pytest.raises(DataError, match=r"field 'links', rule 'link_resolves'.*E1:S9:M9"):
        F.link_examples(episode)
    episode.sessions[2].links.pop()
    episode.sessions[2].turns[1].memory_tags = ["nope"]
    with pytest.raises(DataError, match=r"field 'memory_tags'.*unknown memory 'nope'"):
        F.generation_examples(episode)


def test_session_without_partner(episode):
    episode.sessions[0].partner = None
    assert F.summarize_examples(episode)[1].ref == "Leo"         # the one other speaker of the turns
    episode.sessions[0].turns.append(Turn(id="E1:S1:T4", speaker="Ana", text="Hello both of you."))
    with pytest.raises(DataError, match=r"session E1:S1, field 'partner'"):
        F.summarize_examples(episode)


def test_duplicate_memory_id(episode):
    episode.sessions[2].memories.append(Memory(id="E1:S1:M1", owner="Mia", about="Mia", text="x",
                                               session_id="E1:S3"))
    with pytest.raises(DataError, match="used twice"):
        F.EpisodeView(episode)


@pytest.mark.parametrize("n, word", [(1, "first"), (2, "second"), (6, "sixth"), (12, "twelfth"),
                                     (20, "twentieth"), (21, "twenty-first"), (43, "forty-third"),
                                     (101, "101st"), (111, "111th"), (112, "112th"), (123, "123rd")])
def test_ordinal(n, word):
    assert F.ordinal(n) == word


@pytest.mark.parametrize("kwargs, message", [
    ({"turn_tags": "speakers"}, "turn_tags"),
    ({"negatives_per_positive": -1.0}, "negatives_per_positive"),
    ({"tasks": ("generation", "qa")}, "tasks"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        F.FormatConfig(**kwargs)
