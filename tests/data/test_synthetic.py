"""Tests of pipelines/data/synthetic.py (and its word lists, synthetic_lexicon.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from pipelines.data import synthetic_lexicon as lex
from pipelines.data.schema import QUERY_CATEGORIES_SYNTHETIC, SPLITS, read_episodes
from pipelines.data.synthetic import (CATEGORIES, SyntheticConfig, generate, split_counts, time_expressions,
                                      write_splits)
from pipelines.errors import ConfigError
from pipelines.lexical import bm25_tokens
from pipelines.memory.temporal import extract_time_range

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(episodes=6, sessions=4, turns=6, partners=2, queries_per_session=2)
TINY = SyntheticConfig(**yaml.safe_load((ROOT / "params.yaml").read_text())["synthetic"])   # the tiny profile


@pytest.fixture(scope="module")
def episodes():
    return generate(TINY)


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
    assert TINY == SyntheticConfig()                       # the defaults are params.yaml's
    assert len(episodes) == 12
    assert Counter(e.split for e in episodes) == {"train": 8, "valid": 2, "test": 2}
    for e in episodes:
        assert e.source == "synthetic"
        assert len(e.speakers) == 4 and e.speakers[0].name == e.main_speaker
        assert [s.index for s in e.sessions] == list(range(16))
        assert all(len(s.turns) == 8 for s in e.sessions)
        assert len(e.queries) == 45                       # 3 per session, sessions 2..16
        assert Counter(q.session_id for q in e.queries) == {f"{e.id}:S{k}": 3 for k in range(2, 17)}
    assert sum(len(e.queries) for e in episodes) == 540


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
    assert [q.id for q in e.queries] == [f"syn-0003:Q{j}" for j in range(1, 46)]
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
    assert counts == {"train": 8, "valid": 2, "test": 2}
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
            assert [t.speaker for t in s.turns] == [e.main_speaker, s.partner] * (TINY.turns // 2)


@pytest.mark.parametrize("knobs", [{}, dict(min_gap_hours=2.0)])
def test_timestamps_increase_with_growing_gaps_of_days_or_hours_to_months(episodes, knobs):
    config = replace(TINY, **knobs)
    for e in (episodes if not knobs else generate(config)):
        times = [s.timestamp for s in e.sessions]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(g > timedelta(0) for g in gaps)
        assert gaps == sorted(gaps)
        assert min(gaps) >= timedelta(hours=config.min_gap_hours) - timedelta(minutes=1)
        assert max(gaps) <= timedelta(days=config.max_gap_days, minutes=1)


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


def _statements(episode, subject: str, relation: str, before: int) -> list[int]:
    """Session indexes where ``subject`` stated (or changed) ``relation`` before session ``before``: the turns with
    that triplet whose session wrote a memory of it (a recall turn writes none)."""
    return [s.index for s in episode.sessions[:before] for t in s.turns
            if t.triplets and (t.triplets[0].subject, t.triplets[0].relation) == (subject, relation)
            and any(m.about == subject and t.triplets[0].object in m.text for m in s.memories)]


def test_temporal_answers_depend_on_dates_order_or_the_time_named(episodes):
    kinds = Counter()
    for e in episodes:
        turns, _, sessions = _index(e)
        for q in (q for q in e.queries if q.category == "temporal"):
            first = turns[q.evidence_turns[0]]
            fact = first[1].triplets[0]
            if len(q.evidence_turns) == 1 and q.answer == fact.object:   # "What was X's job when we talked in May?"
                named = extract_time_range(q.question, q.timestamp)
                said = _statements(e, fact.subject, fact.relation, sessions[q.session_id].index)
                assert len(said) >= 2                     # the fact changed: only the time tells its statements apart
                assert [k for k in said if named.contains(e.sessions[k].timestamp)] == [first[0]]
                kinds["at"] += 1
            elif len(q.evidence_turns) == 1:               # "When did X first mention ...?"
                when = e.sessions[first[0]].timestamp
                assert q.answer == f"{when.day} {lex.MONTHS[when.month - 1]} {when.year}"
                kinds["date"] += 1
            elif q.answer.startswith(tuple(f"{x.name}'s " for x in e.speakers)):  # "which came first"
                assert len(q.evidence_sessions) == 2
                assert q.answer == f"{fact.subject}'s {lex.RELATION_BY_NAME[fact.relation].noun}"
                kinds["order"] += 1
            else:                                          # value before the latest change
                second = turns[q.evidence_turns[1]][1].triplets[0]
                assert q.answer == fact.object != second.object
                kinds["before"] += 1
    assert set(kinds) == {"date", "order", "before", "at"}


def test_questions_that_name_a_time_resolve_to_their_evidence(episodes):
    """Every question the temporal rules read a range from names its newest evidence session's day; none other
    does (no accidental range: "May I ask", "these days")."""
    timed, expressions = 0, Counter()
    for e in episodes:
        turns, _, sessions = _index(e)
        for q in e.queries:
            named = extract_time_range(q.question, q.timestamp)
            if named is None:
                continue
            timed += 1
            newest = max(turns[x][0] for x in q.evidence_turns)
            assert named.contains(e.sessions[newest].timestamp)
            earlier = e.sessions[:sessions[q.session_id].index]
            assert len([s for s in earlier if named.contains(s.timestamp)]) < max(len(earlier), 2)   # it tells
            words = named.expression.lower().split()
            expressions["ago" if words[-1] == "ago" else "day" if words[-1].isdigit() or words[-1].endswith(",")
                        else "month" if words[-1].capitalize() in lex.MONTHS else " ".join(words)] += 1
    assert timed >= 0.2 * sum(len(e.queries) for e in episodes)
    assert {"ago", "day", "month"} <= set(expressions)


@pytest.mark.parametrize("today", [date(2023, 3, 15), date(2023, 1, 2), date(2024, 2, 29), date(2022, 12, 31)])
def test_time_expressions_name_the_ranges_the_temporal_rules_read(today):
    for back in range(0, 400, 3):
        day = today - timedelta(days=back)
        found = time_expressions(day, today)
        assert found and all(start <= day <= end for _, start, end in found)
        for phrase, start, end in found:
            for template in lex.TIME_WRAP:
                question = template.format(when=phrase, q_lower="what does Mia do for a living?")
                named = extract_time_range(question, datetime.combine(today, datetime.min.time()))
                assert (named.start.date(), named.end.date()) == (start, end), (phrase, today)


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


# --- threads, distractor sessions, paraphrase ------------------------------------------------------

PROJECT = {p.name: p for p in lex.PROJECTS}


def _threads(episode) -> dict[str, list[int]]:
    """Project name -> the indexes of its sessions: those whose first turn opens or continues it."""
    out: dict[str, list[int]] = {}
    for s in episode.sessions:
        for p in lex.PROJECTS:
            if any(x in s.turns[0].text for x in p.opens + p.again):
                out.setdefault(p.name, []).append(s.index)
    return out


def test_threads_interleave_over_sessions_whose_ids_do_not_tell(episodes):
    apart = 0
    for e in episodes:
        threads = _threads(e)
        assert len(threads) == TINY.threads and all(len(ks) == TINY.thread_sessions for ks in threads.values())
        assert sum(len(ks) for ks in threads.values()) == len({k for ks in threads.values() for k in ks})
        assert [s.id for s in e.sessions] == [f"{e.id}:S{k}" for k in range(1, TINY.sessions + 1)]
        for name, ks in threads.items():
            p = PROJECT[name]
            assert any(x in e.sessions[ks[0]].turns[0].text for x in p.opens)
            assert all(any(x in e.sessions[k].turns[0].text for x in p.again) for k in ks[1:])
            for slot in p.slots:                       # its facts are the main speaker's, said in its sessions only
                assert set(_statements(e, e.main_speaker, slot.name, TINY.sessions)) <= set(ks)
            stated = {k for slot in p.slots for k in _statements(e, e.main_speaker, slot.name, TINY.sessions)}
            assert stated == set(ks)                   # every session of the thread states or changes one
            apart += ks != list(range(ks[0], ks[0] + len(ks)))
        assert any(t.triplets and t.triplets[0].relation == slot.name and t.speaker == e.main_speaker
                   for s in e.sessions for t in s.turns for p in map(PROJECT.get, threads) for slot in p.slots)
    assert apart >= 2 * len(episodes)                  # threads interleave with the other sessions


def test_a_later_thread_session_opens_with_a_question_about_the_threads_newest_facts(episodes):
    asked = vague = 0
    for e in episodes:
        turns, _, _ = _index(e)
        opening = {}
        for q in e.queries:
            opening.setdefault(q.session_id, q)
        for name, ks in _threads(e).items():
            p = PROJECT[name]
            for j, k in enumerate(ks[1:], 1):
                q = opening.get(e.sessions[k].id)
                if q is None:                              # before first_query_session
                    continue
                asked += 1
                vague += any(v in q.question for v in p.vague)
                assert any(h in q.question for h in p.hints + p.vague)      # it names the project
                assert {turns[x][0] for x in q.evidence_turns} <= set(ks[:j])
                for x in q.evidence_turns:
                    fact = turns[x][1].triplets[0]
                    assert fact.subject == e.main_speaker and fact.relation in {r.name for r in p.slots}
                    said = _statements(e, fact.subject, fact.relation, k)
                    assert turns[x][0] in said[-2:]        # the newest statement (and, updated, the one before)
                    if q.category != "multi-session":
                        assert q.answer == turns[q.evidence_turns[-1]][1].triplets[0].object
                        assert turns[x][0] in said[-2:] and said[-1] == turns[q.evidence_turns[-1]][0]
                if any(a in q.question for a in lex.THREAD_LAST):           # "what did I decide last time?"
                    newest = max(i for i in ks[:j])
                    assert [turns[x][0] for x in q.evidence_turns] == [newest]
    assert asked >= 60 and 0 < vague < asked


def test_distractor_sessions_hold_look_alikes_that_carry_no_fact(episodes):
    who = "(?P<who>" + "|".join(map(re.escape, lex.THIRD_PARTIES)) + ")"
    like = [re.compile(re.escape(t).replace(re.escape("{who}"), who).replace(re.escape("{vp}"), "(?P<vp>.+)") + "$")
            for t in lex.LOOK_ALIKES]
    vps = {r.fill(r.vp, v) for r in lex.RELATIONS for v in r.values}
    projects = people = 0
    for e in episodes:
        threads = _threads(e)
        own = {k: name for name, ks in threads.items() for k in ks}
        names = [x.name for x in e.speakers]
        for s in e.sessions:
            for t in s.turns:
                decoy = [p for p in lex.PROJECTS for d in p.decoys for n in names if d.format(name=n) in t.text]
                if decoy:
                    projects += 1
                    assert not t.triplets and not t.memory_tags
                    assert decoy[0].name in threads and own.get(s.index) != decoy[0].name   # another thread's kind
                match = next((m for m in (x.search(t.text) for x in like) if m), None)
                if match:
                    people += 1
                    assert not t.triplets and not t.memory_tags and match["vp"] in vps
    assert projects >= 5 * len(episodes) and people >= 5 * len(episodes)


def test_a_part_of_the_questions_shares_no_word_with_its_evidence(episodes):
    """Paraphrased questions (and those worded by a relation's noun) leave lexical match nothing to match but
    names; the others share a word with their evidence turn."""
    shared = none = swapped = 0
    for e in episodes:
        turns, _, _ = _index(e)
        names = {x.name.lower() for x in e.speakers}
        for q in e.queries:
            words = set(bm25_tokens(q.question)) - names
            said = set().union(*(bm25_tokens(turns[x][1].text) for x in q.evidence_turns))
            shared, none = shared + bool(words & said), none + (not words & said)
            swapped += any(re.search(rf"\b{re.escape(o)}\b", q.question) for key, alts in lex.SYNONYMS.items()
                           for o in alts if re.search(rf"\b{key}\b", " ".join(turns[x][1].text.lower()
                                                                            for x in q.evidence_turns)))
    assert 0.25 < none / (shared + none) < 0.75
    assert swapped >= 30


def test_project_words_paraphrase_and_look_alike():
    def words(text: str) -> set[str]:
        return {w for w in bm25_tokens(text) if len(w) > 2}       # not the "m" of "I'm"

    for p in lex.PROJECTS:
        said = set().union(*(words(x) for x in [*p.hints, *p.opens, *p.again, *p.follow_ups]),
                           *(words(r.fill(t, v)) for r in p.slots for t in r.say + r.change for v in r.values))
        assert all(not words(v) & said for v in p.vague)          # a vague name shares no word with the thread
        assert all(words(d) & said for d in p.decoys)             # a look-alike shares some
        for slot in p.slots:
            assert slot.mutable and all(a.format(s="I") != a.format(s="Mia") for a in slot.ask)
    for word, alternatives in lex.SYNONYMS.items():
        assert word not in alternatives and all(word not in bm25_tokens(a) for a in alternatives)


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
    assert relations == {r.name for r in lex.RELATIONS + lex.PROJECT_RELATIONS} and len(relations) >= 45
    assert len(entities) >= 150
    assert min(len(templates[r.name]) for r in lex.RELATIONS) >= 3
    assert min(len(templates[r.name]) for r in lex.PROJECT_RELATIONS) >= 2     # rarer: a project is in few episodes


def test_lexicon_templates_render():
    assert len(set(lex.NAMES)) == len(lex.NAMES) >= 100
    assert len(lex.RELATION_BY_NAME) == len(lex.RELATIONS) + len(lex.PROJECT_RELATIONS)
    for rel in lex.RELATIONS + lex.PROJECT_RELATIONS:
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
    (dict(threads=7), "threads must be between 0 and 6"),
    (dict(threads=-1), "threads must be between 0 and 6"),
    (dict(threads=1.5), "threads must be an integer"),
    (dict(thread_sessions=1), "thread_sessions must be at least 2"),
    (dict(decoy_rate=1.5), r"decoy_rate must be in \[0, 1\]"),
    (dict(paraphrase_rate=-0.1), r"paraphrase_rate must be in \[0, 1\]"),
    (dict(time_rate="0.5"), "time_rate must be a finite number, got '0.5'"),
])
def test_bad_config_raises_a_config_error(knobs, message):
    with pytest.raises(ConfigError, match=message):
        SyntheticConfig(**knobs)


def test_no_threads_no_distractors_no_paraphrase_no_time():
    config = replace(TINY, threads=0, decoy_rate=0.0, paraphrase_rate=0.0, time_rate=0.0, episodes=3)
    for e in generate(config):
        assert not _threads(e)
        assert not any(t.triplets and t.triplets[0].relation in {r.name for r in lex.PROJECT_RELATIONS}
                       for _, t in e.turns())
        assert not any(extract_time_range(q.question, q.timestamp) for q in e.queries)
        assert not any(v in q.question for q in e.queries for p in lex.PROJECTS for v in p.vague)
    # few threads fit in few sessions; none when a thread would need more sessions than the episode has
    assert len(_threads(generate(replace(config, threads=3, sessions=9, episodes=1))[0])) == 2
    assert not _threads(generate(replace(config, threads=3, sessions=3, episodes=1))[0])


def test_sessions_below_the_first_query_session_have_no_queries():
    (e,) = generate(SyntheticConfig(episodes=1, sessions=1))
    assert e.queries == [] and len(e.sessions) == 1 and e.sessions[0].memories


def test_import_prints_nothing():
    proc = subprocess.run([sys.executable, "-c", "import pipelines.data.synthetic"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert proc.stdout == "" and proc.stderr == ""
