"""Tests of pipelines/data/synthetic.py (and its word lists, synthetic_lexicon.py)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from pipelines.data import synthetic_lexicon as lex
from pipelines.data.schema import QUERY_CATEGORIES_SYNTHETIC, SPLITS, read_episodes
from pipelines.data.synthetic import (CATEGORIES, SyntheticConfig, generate, split_counts,
                                      write_splits)
from pipelines.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(episodes=6, sessions=4, turns=6, partners=2, queries_per_session=2)


@pytest.fixture(scope="module")
def episodes():
    return generate(SyntheticConfig())


def _dump(eps) -> str:
    return "\n".join(e.model_dump_json(exclude_defaults=True) for e in eps)


def _index(episode):
    """turn id -> (session index, turn); memory id -> (session index, memory number, memory)."""
    turns = {t.id: (s.index, t) for s in episode.sessions for t in s.turns}
    memories = {m.id: (s.index, int(m.id.rsplit(":M", 1)[1]), m)
                for s in episode.sessions for m in s.memories}
    sessions = {s.id: s for s in episode.sessions}
    return turns, memories, sessions


# --- determinism and counts ------------------------------------------------------------------

def test_same_seed_gives_byte_identical_files_and_another_seed_differs(tmp_path):
    write_splits(generate(SyntheticConfig(**SMALL)), tmp_path / "a")
    write_splits(generate(SyntheticConfig(**SMALL)), tmp_path / "b")
    for split in SPLITS:
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == \
            (tmp_path / "b" / f"{split}.jsonl").read_bytes()
    assert _dump(generate(SyntheticConfig(**SMALL, seed=1))) != _dump(generate(SyntheticConfig(**SMALL)))


def test_default_counts_match_the_tiny_profile(episodes):
    assert len(episodes) == 24
    assert Counter(e.split for e in episodes) == {"train": 16, "valid": 4, "test": 4}
    for e in episodes:
        assert e.source == "synthetic"
        assert len(e.speakers) == 4 and e.speakers[0].name == e.main_speaker
        assert [s.index for s in e.sessions] == [0, 1, 2, 3, 4, 5]
        assert all(len(s.turns) == 10 for s in e.sessions)
        assert len(e.queries) == 15                       # 3 per session, sessions 2..6
        assert Counter(q.session_id for q in e.queries) == {f"{e.id}:S{k}": 3 for k in range(2, 7)}
    assert sum(len(e.queries) for e in episodes) == 360


def test_knobs_change_the_counts():
    eps = generate(SyntheticConfig(episodes=5, sessions=3, turns=4, partners=2, queries_per_session=1,
                                   first_query_session=3, train_fraction=0.6, valid_fraction=0.2,
                                   test_fraction=0.2))
    assert len(eps) == 5 and Counter(e.split for e in eps) == {"train": 3, "valid": 1, "test": 1}
    for e in eps:
        assert len(e.speakers) == 3 and len(e.sessions) == 3
        assert [len(s.turns) for s in e.sessions] == [4, 4, 4]
        assert [q.session_id for q in e.queries] == [f"{e.id}:S3"]


def test_ids_follow_the_scheme(episodes):
    e = episodes[2]
    assert [x.id for x in episodes[:3]] == ["syn-0001", "syn-0002", "syn-0003"]
    assert e.sessions[1].id == "syn-0003:S2" and e.sessions[1].turns[4].id == "syn-0003:S2:T5"
    assert [m.id for m in e.sessions[1].memories] == \
        [f"syn-0003:S2:M{j}" for j in range(1, len(e.sessions[1].memories) + 1)]
    assert [q.id for q in e.queries] == [f"syn-0003:Q{j}" for j in range(1, 16)]
    for ep in episodes:
        ids = [ep.id] + [s.id for s in ep.sessions] + [t.id for _, t in ep.turns()] \
            + [m.id for m in ep.memories()] + [q.id for q in ep.queries]
        assert len(ids) == len(set(ids))


# --- splits -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, fractions, expected", [
    (24, (2 / 3, 1 / 6, 1 / 6), (16, 4, 4)),
    (6, (2 / 3, 1 / 6, 1 / 6), (4, 1, 1)),
    (10, (0.8, 0.1, 0.1), (8, 1, 1)),
    (4, (0.9, 0.05, 0.05), (2, 1, 1)),      # every split with a positive fraction gets one
    (2, (2 / 3, 1 / 6, 1 / 6), (1, 1, 0)),  # too few episodes for three splits
    (1, (2 / 3, 1 / 6, 1 / 6), (1, 0, 0)),
    (3, (1.0, 0.0, 0.0), (3, 0, 0)),
])
def test_split_counts(n, fractions, expected):
    assert split_counts(n, fractions) == expected


def test_split_is_by_episode_and_written_to_three_files(tmp_path, episodes):
    counts = write_splits(episodes, tmp_path)
    assert counts == {"train": 16, "valid": 4, "test": 4}
    seen: dict[str, str] = {}
    for split in SPLITS:
        back = read_episodes(tmp_path / f"{split}.jsonl")
        assert len(back) == counts[split] and all(e.split == split for e in back)
        for e in back:
            assert e.id not in seen
            seen[e.id] = split
    assert sorted(seen) == sorted(e.id for e in episodes)
    assert read_episodes(tmp_path / "test.jsonl") == [e for e in episodes if e.split == "test"]


# --- sessions, partners, time ---------------------------------------------------------------------

def test_one_partner_per_session_rotating_and_turns_alternate(episodes):
    for e in episodes:
        partners = [s.name for s in e.speakers[1:]]
        order = [s.partner for s in e.sessions]
        assert set(order) == set(partners)                # every partner at least once
        assert all(a != b for a, b in zip(order, order[1:]))
        for s in e.sessions:
            assert [t.speaker for t in s.turns] == [e.main_speaker, s.partner] * 5


def test_timestamps_increase_with_growing_gaps_of_hours_to_months(episodes):
    for e in episodes:
        times = [s.timestamp for s in e.sessions]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(g > timedelta(0) for g in gaps)
        assert gaps == sorted(gaps)
        assert min(gaps) >= timedelta(hours=2) - timedelta(minutes=1)
        assert max(gaps) <= timedelta(days=90, minutes=1)


def test_speakers_have_names_roles_and_persona(episodes):
    for e in episodes:
        names = [s.name for s in e.speakers]
        assert len(set(names)) == 4
        main = e.speakers[0]
        assert main.role in lex.RELATION_BY_NAME["works_as"].values
        assert all(s.role in lex.PARTNER_ROLES for s in e.speakers[1:])
        assert all(len(s.persona) == 3 and all(p.endswith(".") for p in s.persona) for s in e.speakers)


# --- turns, triplets, memories, links, tags ---------------------------------------------------------

def test_chit_chat_turns_carry_no_facts_and_fact_turns_carry_their_speakers_triplet(episodes):
    chat = facts = 0
    for e in episodes:
        for s, t in e.turns():
            assert len(t.text) >= 10
            if not t.triplets:
                chat += 1
                assert not t.memory_tags
            elif not t.memory_tags or t.speaker == e.main_speaker:
                facts += 1
                assert len(t.triplets) == 1
                assert t.triplets[0].object in t.text
                if not t.memory_tags:                      # a new fact: its speaker's own
                    assert t.triplets[0].subject == t.speaker
    assert 0.2 < chat / (chat + facts) < 0.4               # distractor_density = 0.3


def test_memories_are_egocentric_and_cover_every_new_fact(episodes):
    for e in episodes:
        for s in e.sessions:
            assert s.memories
            for m in s.memories:
                assert m.owner == e.main_speaker and m.about in (e.main_speaker, s.partner)
                assert m.session_id == s.id and m.text.startswith(m.about + " ") and m.text.endswith(".")
                assert m.kind in ("fact", "update")
                assert (m.kind == "update") == (" now " in m.text)
            for t in s.turns:
                if t.triplets and not t.memory_tags:
                    fact = t.triplets[0]
                    assert any(m.about == fact.subject and fact.object in m.text for m in s.memories)


def test_links_point_from_newer_to_earlier_memories_and_every_update_has_one(episodes):
    for e in episodes:
        _, memories, _ = _index(e)
        for s in e.sessions:
            linked_from = {link.from_id for link in s.links}
            for link in s.links:
                assert link.from_id in {m.id for m in s.memories}
                new, old = memories[link.from_id], memories[link.to_id]
                assert (old[0], old[1]) < (new[0], new[1])
            for m in s.memories:
                if m.kind == "update":
                    assert m.id in linked_from
                    olds = [memories[x.to_id][2] for x in s.links if x.from_id == m.id]
                    assert any(o.about == m.about for o in olds)


def test_memory_tags_resolve_to_earlier_memories_on_main_speaker_turns(episodes):
    tagged = 0
    for e in episodes:
        _, memories, _ = _index(e)
        for s, t in e.turns():
            for tag in t.memory_tags:
                tagged += 1
                assert t.speaker == e.main_speaker
                session_index, _, memory = memories[tag]
                assert session_index < s.index
                assert memory.about == t.triplets[0].subject
    assert tagged >= 100


def test_summaries_name_the_speakers_and_the_session_facts(episodes):
    for e in episodes:
        for s in e.sessions:
            assert e.main_speaker in s.summary and s.partner in s.summary
            assert f"{s.timestamp.day} {lex.MONTHS[s.timestamp.month - 1]} {s.timestamp.year}" in s.summary
            for t in s.turns:
                if t.triplets:
                    assert t.triplets[0].object in s.summary


# --- queries -----------------------------------------------------------------------------------

def test_query_evidence_resolves_and_is_strictly_earlier(episodes):
    for e in episodes:
        turns, memories, sessions = _index(e)
        for q in e.queries:
            asked_in = sessions[q.session_id]
            assert q.timestamp == asked_in.timestamp and q.answer
            assert q.category in QUERY_CATEGORIES_SYNTHETIC
            assert q.evidence_turns and q.evidence_memories
            assert all(sessions[x].index < asked_in.index for x in q.evidence_sessions)
            assert q.evidence_sessions == list(dict.fromkeys(
                e.sessions[turns[x][0]].id for x in q.evidence_turns))
            assert [memories[x][0] for x in q.evidence_memories] == [turns[x][0] for x in q.evidence_turns]


def test_all_four_categories_are_present(episodes):
    counts = Counter(q.category for e in episodes for q in e.queries)
    assert set(counts) == set(CATEGORIES) == set(QUERY_CATEGORIES_SYNTHETIC)
    assert min(counts.values()) >= 50


def test_single_and_multi_session_answers_come_from_their_evidence(episodes):
    for e in episodes:
        turns, _, _ = _index(e)
        for q in e.queries:
            objects = [turns[x][1].triplets[0].object for x in q.evidence_turns]
            if q.category == "single-session":
                assert len(q.evidence_sessions) == 1 and q.answer == objects[0]
            elif q.category == "multi-session":
                assert len(q.evidence_sessions) == 2
                assert q.answer in (f"{objects[0]} and {objects[1]}", f"{objects[1]} and {objects[0]}")


def test_knowledge_update_answers_the_newest_value_with_a_link_to_the_old(episodes):
    for e in episodes:
        turns, memories, sessions = _index(e)
        for q in (q for q in e.queries if q.category == "knowledge-update"):
            facts = [turns[x][1].triplets[0] for x in q.evidence_turns]
            assert len({(f.subject, f.relation) for f in facts}) == 1 and len(q.evidence_sessions) == 2
            assert q.answer == facts[-1].object and facts[-2].object != facts[-1].object
            newest, previous = q.evidence_memories[-1], q.evidence_memories[-2]
            session = e.sessions[memories[newest][0]]
            assert any(x.from_id == newest and x.to_id == previous for x in session.links)
            # Nothing said after the update turn and before the query contradicts the answer.
            last = q.evidence_turns[-1]
            later = [t for s in e.sessions[turns[last][0]:sessions[q.session_id].index] for t in s.turns]
            later = later[[t.id for t in later].index(last):]
            for t in later:
                if t.triplets and (t.triplets[0].subject, t.triplets[0].relation) == \
                        (facts[-1].subject, facts[-1].relation):
                    assert t.triplets[0].object == q.answer


def test_temporal_answers_depend_on_dates_or_order(episodes):
    kinds = Counter()
    for e in episodes:
        turns, _, _ = _index(e)
        for q in (q for q in e.queries if q.category == "temporal"):
            first = turns[q.evidence_turns[0]]
            if len(q.evidence_turns) == 1:                 # "When did X first mention ...?"
                when = e.sessions[first[0]].timestamp
                assert q.answer == f"{when.day} {lex.MONTHS[when.month - 1]} {when.year}"
                kinds["date"] += 1
            elif q.answer.startswith(tuple(f"{x.name}'s " for x in e.speakers)):  # "which came first"
                fact = first[1].triplets[0]
                assert len(q.evidence_sessions) == 2
                assert q.answer == f"{fact.subject}'s {lex.RELATION_BY_NAME[fact.relation].noun}"
                kinds["order"] += 1
            else:                                          # value before the latest change
                second = turns[q.evidence_turns[1]][1].triplets[0]
                assert q.answer == first[1].triplets[0].object != second.object
                kinds["before"] += 1
    assert set(kinds) == {"date", "order", "before"}


def test_questions_paraphrase_and_never_contain_their_evidence(episodes):
    for e in episodes:
        turns, _, _ = _index(e)
        for q in e.queries:
            for x in q.evidence_turns:
                text = turns[x][1].text
                assert text not in q.question and q.question not in text
                fact = turns[x][1].triplets[0]
                rel = lex.RELATION_BY_NAME[fact.relation]
                assert not any(rel.fill(t, fact.object) in q.question for t in rel.say + rel.change)
                assert fact.object not in q.question
    assert len({q.question for e in episodes for q in e.queries}) >= 300


# --- variety --------------------------------------------------------------------------------------

def test_variety_of_relations_entities_and_templates(episodes):
    relations, entities, templates = set(), set(), {}
    for e in episodes:
        for _, t in e.turns():
            for fact in t.triplets:
                relations.add(fact.relation)
                entities.update((fact.subject, fact.object))
                rel = lex.RELATION_BY_NAME[fact.relation]
                used = {i for i, x in enumerate(rel.say + rel.change) if rel.fill(x, fact.object) in t.text}
                templates.setdefault(fact.relation, set()).update(used)
    assert relations == {r.name for r in lex.RELATIONS} and len(relations) >= 30
    assert len(entities) >= 150
    assert min(len(v) for v in templates.values()) >= 3


def test_lexicon_templates_render():
    assert len(set(lex.NAMES)) == len(lex.NAMES) >= 100
    for rel in lex.RELATIONS:
        assert len(rel.say) >= 3 and len(rel.ask) >= 2 and len(rel.values) >= 10
        assert len(set(rel.values)) == len(rel.values)
        for template in rel.say + rel.change:
            assert rel.values[0] in rel.fill(template, rel.values[0])
        assert all("{o}" not in a and "{a_o}" not in a and a.endswith("?") for a in rel.ask)
    assert lex.RELATION_BY_NAME["works_as"].fill("I am {a_o}.", "architect") == "I am an architect."
    assert lex.RELATION_BY_NAME["works_as"].vp_now("chef") == "now works as a chef"
    assert lex.RELATION_BY_NAME["is_learning_language"].vp_now("Dutch") == "is now learning Dutch"


# --- scale and config -------------------------------------------------------------------------------

def test_a_thousand_session_episode_generates():
    (e,) = generate(SyntheticConfig(episodes=1, sessions=1000, turns=4, queries_per_session=1,
                                    train_fraction=1.0, valid_fraction=0.0, test_fraction=0.0))
    assert e.split == "train" and len(e.sessions) == 1000 and e.sessions[-1].id == "syn-0001:S1000"
    assert len(e.queries) == 999
    assert min(Counter(s.partner for s in e.sessions).values()) >= 333
    turns, _, sessions = _index(e)
    assert len(turns) == 4000
    assert all(turns[x][0] < sessions[q.session_id].index for q in e.queries for x in q.evidence_turns)


@pytest.mark.parametrize("knobs, message", [
    (dict(turns=1), "turns must be at least 2"),
    (dict(partners=0), "partners must be at least 1"),
    (dict(partners=40), "partner roles"),
    (dict(episodes="24"), "episodes must be an integer"),
    (dict(distractor_density=1.0), "distractor_density"),
    (dict(train_fraction=0.5), "sum to 1"),
    (dict(first_query_session=1), "earlier sessions"),
    (dict(min_gap_hours=48.0, max_gap_days=1.0), "min_gap_hours"),
    (dict(id_prefix="a:b"), "id_prefix"),
    (dict(episodes=-3), "episodes must be at least 1, got -3"),
    (dict(distractor_density="0.3"), "distractor_density must be a finite number, got '0.3'"),
    (dict(min_gap_hours=None), "min_gap_hours must be a finite number, got None"),
    (dict(recall_rate=float("inf")), "recall_rate must be a finite number"),
    (dict(id_prefix=7), "id_prefix must be a string, got 7"),
])
def test_bad_config_raises_a_config_error(knobs, message):
    with pytest.raises(ConfigError, match=message):
        SyntheticConfig(**knobs)


def test_sessions_below_the_first_query_session_have_no_queries():
    (e,) = generate(SyntheticConfig(episodes=1, sessions=1))
    assert e.queries == [] and len(e.sessions) == 1 and e.sessions[0].memories


def test_import_prints_nothing():
    proc = subprocess.run([sys.executable, "-c", "import pipelines.data.synthetic"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert proc.stdout == "" and proc.stderr == ""
