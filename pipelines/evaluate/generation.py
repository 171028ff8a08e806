"""EMMA's generation inputs under the temporal protocol (RealMem's loop at turn level): what the egocentric memory
retrieves before each turn, composed into the generation sequence the dialogue module answers. The responses are
scored by :mod:`pipelines.text_metrics`.
"""

from __future__ import annotations

from pipelines.emma.formats import fit_history
from pipelines.memory.egocentric import session_partner


def temporal_generation_inputs(strategy, episodes, turn_ids=None, count_tokens=None, budget: int | None = None,
                               stats: dict[str, float] | None = None) -> dict[str, tuple[int, str]]:
    """turn id -> (session number, generation sequence) of each main-speaker turn (those in ``turn_ids``
    when given), composed by the egocentric ``strategy`` as EMMA answers under the temporal protocol.

    RealMem's loop at turn level: a fresh memory per episode; sessions in time order; every turn of a
    session is composed from the memory of the sessions before it (the retriever's top-1 and the memories
    linked to it, :meth:`~pipelines.memory.egocentric.Egocentric.compose`) and the session's turns so far;
    only then does the session enter memory. With ``count_tokens`` and ``budget`` the oldest turns are
    dropped until the sequence fits (:func:`pipelines.emma.formats.fit_history`), as the generation
    examples are fitted. ``stats`` (when given) receives what the main speaker's memory held at the end of
    each episode, summed: ``memories``, ``distinct_memories`` (distinct sentences), ``links``; ``empty``: the
    composed turns whose memory block is empty; ``episodes``.
    """
    wanted = set(turn_ids) if turn_ids is not None else None
    episodes = list(episodes)
    strategy.prepare(episodes)
    turns = {episode.id: [(session, session_partner(episode, session), pos)
                          for session in sorted(episode.sessions, key=lambda s: s.index)
                          for pos, turn in enumerate(session.turns)
                          if turn.speaker == episode.main_speaker and (wanted is None or turn.id in wanted)]
             for episode in episodes}

    def history(session, pos):
        return [(t.speaker, t.text) for t in session.turns[:pos]]

    strategy.encode_contexts([strategy.bare_input(episode, episode.main_speaker, partner, session.index + 1,
                                                  history(session, pos)).context()
                              for episode in episodes for session, partner, pos in turns[episode.id]])
    out: dict[str, tuple[int, str]] = {}
    counts = {"episodes": 0.0, "memories": 0.0, "distinct_memories": 0.0, "links": 0.0, "empty": 0.0}
    for episode in episodes:
        strategy.reset()
        main = episode.main_speaker
        todo = turns[episode.id]
        for session in sorted(episode.sessions, key=lambda s: s.index):
            for turn_session, partner, pos in todo:
                if turn_session is not session:
                    continue
                inp = strategy.compose(main, partner, session.index + 1, history(session, pos), episode=episode)
                if count_tokens is not None and budget is not None:
                    inp = fit_history(inp, count_tokens, budget)
                out[session.turns[pos].id] = (session.index + 1, inp.render())
                counts["empty"] += not inp.memories
            strategy.observe(episode, session)
        held = strategy.memory_of(main)
        counts["episodes"] += 1
        counts["memories"] += len(held)
        counts["distinct_memories"] += len({m.text for m in held.items.values()})
        counts["links"] += sum(len(v) for v in held.links.values()) / 2
    if stats is not None:
        stats.update(counts)
    return out
