"""A hand-built episode for the protocol and report tests.

Four sessions (listed out of time order on purpose), two turns each; every line
"Ana: <three words>." costs 6 regex tokens. Queries cover each protocol rule:

    Q1  in S2, evidence S1:T1                     scored (single-session)
    Q2  in S3, evidence S1:T2 + S2:T1, S1 + S2    scored (multi-session)
    Q3  in S3, evidence S3:T1 (the current one)   excluded: evidence_not_earlier
    Q4  in S2, evidence S4:T2 (a later one)       excluded: evidence_not_earlier
    Q5  in S4, abstention                         excluded: abstention
    Q6  after the last session, evidence S4:T2    scored (no category)
    Q7  in S4, flagged by its loader              excluded: evidence_not_earlier
    Q8  in S4, no evidence at all                 excluded: no_evidence
    Q9  in S3, only memory evidence S1:M1         memory granularity only
"""

from __future__ import annotations

import pytest

from pipelines.data.schema import Episode, Memory, Query, Session, Turn

WORDS = {"S1": ["red kite flies.", "blue boat sails."], "S2": ["green tea steeps.", "grey cat sleeps."],
         "S3": ["pink rose blooms.", "gold coin shines."], "S4": ["white snow falls.", "black ink dries."]}


def build_episode() -> Episode:
    sessions = {sid: Session(id=f"p1:{sid}", index=int(sid[1]) - 1,
                             turns=[Turn(id=f"p1:{sid}:T{n}", speaker="Ana", text=text)
                                    for n, text in enumerate(words, 1)],
                             memories=[Memory(id=f"p1:{sid}:M1", owner="Ana", about="Ana", text=f"Ana said {words[0]}",
                                              session_id=f"p1:{sid}")])
                for sid, words in WORDS.items()}
    queries = [
        Query(id="Q1", session_id="p1:S2", question="What flies?", evidence_turns=["p1:S1:T1"],
              category="single-session"),
        Query(id="Q2", session_id="p1:S3", question="What sails and steeps?",
              evidence_turns=["p1:S1:T2", "p1:S2:T1"], evidence_sessions=["p1:S1", "p1:S2"],
              category="multi-session"),
        Query(id="Q3", session_id="p1:S3", question="What blooms?", evidence_turns=["p1:S3:T1"]),
        Query(id="Q4", session_id="p1:S2", question="What dries?", evidence_turns=["p1:S4:T2"]),
        Query(id="Q5", session_id="p1:S4", question="What is Ana's blood type?", abstention=True),
        Query(id="Q6", session_id=None, question="What dries?", evidence_turns=["p1:S4:T2"]),
        Query(id="Q7", session_id="p1:S4", question="What flies?", evidence_turns=["p1:S1:T1"],
              flags=["evidence_not_earlier"]),
        Query(id="Q8", session_id="p1:S4", question="Anything?"),
        Query(id="Q9", session_id="p1:S3", question="What did Ana say first?", evidence_memories=["p1:S1:M1"]),
    ]
    order = ["S1", "S3", "S2", "S4"]  # not time order: the protocol sorts by Session.index
    return Episode(id="p1", source="test", main_speaker="Ana", sessions=[sessions[s] for s in order],
                   queries=queries)


@pytest.fixture
def episode() -> Episode:
    return build_episode()
