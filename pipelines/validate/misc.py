"""MiSC's dataset filters (Appendix D) as validation rules, applied with profile="misc".

Kang et al., 2024, "Mixed-Session Conversation with Egocentric Memory" (arXiv 2410.02503),
Appendix D: a scenario names four speakers (one main speaker, three partners) and six sessions,
each session names one interacting partner, every partner takes part in at least one session;
sessions with mismatched speakers, speakers that disagree with their utterances, or utterances
under 10 characters are filtered out; episodes with missing memory or overlooked speaker
information are excluded. The thresholds are the ``MISC_*`` constants of
``pipelines.validate.rules``.

"Partners" are the listed speakers other than the main speaker. Rules that need a session's
partner (turn speakers, memory subjects) skip sessions whose partner is missing or unknown:
``misc_one_partner_per_session`` reports those once.
"""

from __future__ import annotations

from collections import defaultdict

from pipelines.validate.integrity import short_turns
from pipelines.validate.rules import (MISC_MIN_MEMORIES_PER_SESSION, MISC_MIN_UTTERANCE_CHARS, MISC_PARTNERS,
                                      MISC_SESSIONS, MISC_SPEAKERS, Failure, Tables, blank, check)


def _partners(t: Tables) -> dict[int, list[str]]:
    """episode_pos -> names of the listed speakers other than the main speaker."""
    main = dict(zip(t["episodes"]["episode_pos"], t["episodes"]["main_speaker"]))
    out: dict[int, list[str]] = defaultdict(list)
    for e_pos, name in zip(t["speakers"]["episode_pos"], t["speakers"]["name"]):
        if name != main[e_pos]:
            out[e_pos].append(name)
    return out


def _valid_partner(t: Tables) -> dict[tuple[int, int], str]:
    """(episode_pos, session_pos) -> the session's partner, for sessions whose partner is valid."""
    partners = _partners(t)
    return {(r.episode_pos, r.session_pos): r.partner for r in t["sessions"].itertuples()
            if not blank(r.partner) and r.partner in partners.get(r.episode_pos, ())}


@check("misc_four_speakers")
def misc_four_speakers(t: Tables) -> list[Failure]:
    partners = _partners(t)
    out = []
    for r in t["episodes"].itertuples():
        n_partners = len(partners.get(r.episode_pos, ()))
        if r.n_speakers != MISC_SPEAKERS or n_partners != MISC_PARTNERS:
            out.append(Failure(r.record, f"episode {r.episode_id!r} names {r.n_speakers} speakers with "
                                         f"{n_partners} partners besides main speaker {r.main_speaker!r} "
                                         f"(MiSC: {MISC_SPEAKERS} speakers, {MISC_PARTNERS} partners)"))
    return out


@check("misc_six_sessions")
def misc_six_sessions(t: Tables) -> list[Failure]:
    return [Failure(r.record, f"episode {r.episode_id!r} has {r.n_sessions} sessions (MiSC: {MISC_SESSIONS})")
            for r in t["episodes"].itertuples() if r.n_sessions != MISC_SESSIONS]


@check("misc_one_partner_per_session")
def misc_one_partner_per_session(t: Tables) -> list[Failure]:
    # Session.partner holds one name: "exactly one" means it is given and is one listed partner
    # (a joined "Bob and Cara" is not a listed partner).
    partners, valid = _partners(t), _valid_partner(t)
    out = []
    for r in t["sessions"].itertuples():
        if (r.episode_pos, r.session_pos) in valid:
            continue
        what = ("names no partner" if blank(r.partner) else
                f"names partner {r.partner!r}, not one of the scenario's partners "
                f"{', '.join(map(repr, partners.get(r.episode_pos, []))) or '(none)'}")
        out.append(Failure(r.record, f"session {r.session_id!r} {what}"))
    return out


@check("misc_every_partner_appears")
def misc_every_partner_appears(t: Tables) -> list[Failure]:
    seen = set(zip(t["sessions"]["episode_pos"], t["sessions"]["partner"]))
    ep = t["episodes"].set_index("episode_pos")
    out = []
    for e_pos, names in _partners(t).items():
        for name in names:
            if (e_pos, name) not in seen:
                out.append(Failure(ep.at[e_pos, "record"], f"partner {name!r} of episode "
                                                           f"{ep.at[e_pos, 'episode_id']!r} is in no session"))
    return out


@check("misc_turn_speakers_match")
def misc_turn_speakers_match(t: Tables) -> list[Failure]:
    main = dict(zip(t["episodes"]["episode_pos"], t["episodes"]["main_speaker"]))
    names: dict[int, set[str]] = defaultdict(set)
    for e_pos, name in zip(t["speakers"]["episode_pos"], t["speakers"]["name"]):
        names[e_pos].add(name)
    valid = _valid_partner(t)
    out = []
    for r in t["turns"].itertuples():
        partner = valid.get((r.episode_pos, r.session_pos))
        if partner is None:
            continue  # reported by misc_one_partner_per_session
        allowed = (main[r.episode_pos], partner)
        if r.speaker not in allowed:
            out.append(Failure(r.record, f"turn {r.turn_id!r} is spoken by {r.speaker!r}, not by "
                                         f"{allowed[0]!r} or {allowed[1]!r}"))
            continue
        head = r.text.split(":", 1)[0].strip() if isinstance(r.text, str) and ":" in r.text else None
        if head is not None and head != r.speaker and head in names[r.episode_pos]:
            out.append(Failure(r.record, f"turn {r.turn_id!r} by {r.speaker!r} opens with another speaker's "
                                         f"name: {head + ':'!r}"))
    return out


@check("misc_utterance_min_length")
def misc_utterance_min_length(t: Tables) -> list[Failure]:
    return short_turns(t, MISC_MIN_UTTERANCE_CHARS)


@check("misc_memory_present")
def misc_memory_present(t: Tables) -> list[Failure]:
    return [Failure(r.record, f"session {r.session_id!r} holds {r.n_memories} memories "
                              f"(MiSC: at least {MISC_MIN_MEMORIES_PER_SESSION})")
            for r in t["sessions"].itertuples() if r.n_memories < MISC_MIN_MEMORIES_PER_SESSION]


@check("misc_memory_speakers")
def misc_memory_speakers(t: Tables) -> list[Failure]:
    main = dict(zip(t["episodes"]["episode_pos"], t["episodes"]["main_speaker"]))
    valid = _valid_partner(t)
    out = []
    for r in t["memories"].itertuples():
        me = main[r.episode_pos]
        if r.owner != me:
            out.append(Failure(r.record, f"memory {r.memory_id!r} belongs to {r.owner!r}, not to main speaker "
                                         f"{me!r}"))
            continue
        partner = valid.get((r.episode_pos, r.session_pos))
        if partner is not None and r.about not in (me, partner):
            out.append(Failure(r.record, f"memory {r.memory_id!r} in session {r.listed_in!r} is about "
                                         f"{r.about!r}, not {me!r} or the session's partner {partner!r}"))
    return out
