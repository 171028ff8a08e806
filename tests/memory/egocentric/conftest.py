"""Fixtures of the egocentric-memory tests: Mia's three sessions (as in tests/emma), a keyword retriever.

Mia (nurse) talks with Leo (her brother, S1), Ana (coworker, S2), Leo again (S3). Her memories:
S1:M1 "Mia adopted a puppy." (about Mia), S1:M2 "Leo is moving to Lisbon in May." (about Leo);
S2:M1 "Mia named her puppy Biscuit." -> S1:M1, S2:M2 "Mia plans to visit Leo in Lisbon." -> S1:M2;
S3:M1 "Leo moved to Lisbon." -> S1:M2. Leo keeps his own memory of S1: L1 "Mia adopted a puppy and
seems happy about Lisbon." (owner Leo), which Mia must never see.
"""

from __future__ import annotations

import pytest
import torch

from pipelines.data.schema import Episode, Memory, MemoryLink, Session, Speaker, Turn

KEYWORDS = ("puppy", "biscuit", "lisbon", "visit", "moved", "happy")


class KeywordRetriever:
    """A deterministic stand-in for the dual encoder: one dimension per keyword (test double)."""

    def _vec(self, texts):
        rows = [[float(k in t.lower()) for k in KEYWORDS] for t in texts]
        return torch.tensor(rows)                                       # (N, len(KEYWORDS))

    def encode_memory(self, texts):
        return self._vec(texts)

    def encode_context(self, texts):
        # only the last turn of the context counts, as a question would
        return self._vec([t.rsplit("]", 2)[-2] if t.count("]") >= 2 else t for t in texts])


def _turns(sid, rows):
    return [Turn(id=f"{sid}:T{i + 1}", speaker=s, text=t) for i, (s, t) in enumerate(rows)]


def mia_episode() -> Episode:
    s1 = Session(id="E1:S1", index=0, partner="Leo", turns=_turns("E1:S1", [
        ("Mia", "Hi Leo, I adopted a puppy last week."),
        ("Leo", "Congratulations! I am moving to Lisbon in May."),
    ]), memories=[
        Memory(id="E1:S1:M1", owner="Mia", about="Mia", text="Mia adopted a puppy.", session_id="E1:S1"),
        Memory(id="E1:S1:M2", owner="Mia", about="Leo", text="Leo is moving to Lisbon in May.", session_id="E1:S1"),
        Memory(id="E1:S1:L1", owner="Leo", about="Mia", text="Mia adopted a puppy and seems happy about Lisbon.",
               session_id="E1:S1"),
    ])
    s2 = Session(id="E1:S2", index=1, partner="Ana", turns=_turns("E1:S2", [
        ("Ana", "How is the new puppy doing?"),
        ("Mia", "Biscuit is great, and I will visit my brother in Lisbon."),
    ]), memories=[
        Memory(id="E1:S2:M1", owner="Mia", about="Mia", text="Mia named her puppy Biscuit.", session_id="E1:S2"),
        Memory(id="E1:S2:M2", owner="Mia", about="Mia", text="Mia plans to visit Leo in Lisbon.", session_id="E1:S2"),
    ], links=[MemoryLink(from_id="E1:S2:M1", to_id="E1:S1:M1"), MemoryLink(from_id="E1:S2:M2", to_id="E1:S1:M2")])
    s3 = Session(id="E1:S3", index=2, partner="Leo", turns=_turns("E1:S3", [
        ("Leo", "I finally moved to Lisbon!"),
        ("Mia", "I know, and I am coming to visit you with Biscuit."),
    ]), memories=[
        Memory(id="E1:S3:M1", owner="Mia", about="Leo", text="Leo moved to Lisbon.", session_id="E1:S3"),
    ], links=[MemoryLink(from_id="E1:S3:M1", to_id="E1:S1:M2")])
    return Episode(id="E1", source="misc", main_speaker="Mia", speakers=[
        Speaker(name="Mia", role="nurse"), Speaker(name="Leo", role="her brother"),
        Speaker(name="Ana", role="coworker")], sessions=[s1, s2, s3], split="test")


@pytest.fixture
def mia() -> Episode:
    return mia_episode()


@pytest.fixture
def keywords() -> KeywordRetriever:
    return KeywordRetriever()


@pytest.fixture(scope="module")
def tiny_dialogue(tmp_path_factory):
    """A REAL EMMA dialogue module (pipelines.emma.dialogue.EMMADialogue): the tiny random-init T5, 4-bit NF4
    with LoRA, its BPE trained on a little synthetic data, then 15 steps on Mia's summarisation and linking
    examples so that it answers with words (a random init answers with nothing). ~10 s on one CPU core."""
    from pipelines.data.synthetic import SyntheticConfig, generate
    from pipelines.emma.dialogue import EMMADialogue
    from pipelines.emma.dialogue_config import EMMADialogueConfig
    from pipelines.emma.dialogue_encoding import encode_examples
    from pipelines.emma.dialogue_training import EMMADialogueTask, seq2seq_loss
    from pipelines.emma.formats import build_examples

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        episodes = generate(SyntheticConfig(episodes=2, sessions=3, turns=6, partners=2, queries_per_session=1))
        cfg = EMMADialogueConfig(tokenizer_vocab_size=600, max_source_length=256, device="cpu", max_new_tokens=6)
        task = EMMADialogueTask(cfg, build_examples(episodes), (), work_dir=tmp_path_factory.mktemp("emma"))
        torch.manual_seed(0)
        model = task.build_model()
        mine = [e for e in build_examples([mia_episode()]) if e.task in ("summarize", "link")]
        batch = task.collate(encode_examples(task.tokenizer, mine, 256, 64))
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model.train()
        for _ in range(15):
            loss, _ = seq2seq_loss(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
        yield EMMADialogue(model, task.tokenizer, cfg)
    finally:
        torch.set_num_threads(before)
