"""``mdr`` strategy: MDR's history selection (seed 001, eq. 7) over the observed turns.

A tiny untrained teacher is built and saved in tmp_path exactly as stage mdr_teacher saves it
(MDRTeacherTask.build_model + save_final: encoder/, decoder/, tokenizer/, mdr_config.json).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipelines.data.schema import Turn
from pipelines.data.tasks import build_mdr_examples
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.mdr.config import MDRConfig
from pipelines.mdr.features import sentence_features
from pipelines.mdr.student import select_history
from pipelines.mdr.tasks import MDRTeacherTask, gpt2_factory
from pipelines.mdr.teacher import MDRTeacher
from pipelines.mdr.text import Codec, load_codec, pad
from pipelines.memory import STRATEGIES, Selector, build_strategy, missing_models
from pipelines.memory.mdr import MDR, MDRStrategyConfig, load_teacher_encoder

from tests.memory.conftest import build_episode

QUESTION = "What is the name of Ana's greyhound?"
MAX_Q, MAX_H = 16, 48  # the teacher's max_query_tokens / max_history_tokens (no round is cut)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    from pipelines.models.tokenizers import train_bpe_tokenizer

    out = tmp_path_factory.mktemp("models")
    episode = build_episode()
    texts = [t.text for _, t in episode.turns()] + [QUESTION]
    codec = Codec(train_bpe_tokenizer(texts, 300, min_frequency=1))
    cfg = MDRConfig(model="tiny", max_query_tokens=16, max_response_tokens=16, max_persona_tokens=16,
                    max_history_tokens=MAX_H)
    torch.manual_seed(0)
    task = MDRTeacherTask(cfg, build_mdr_examples([episode]), None, codec, gpt2_factory("tiny", codec))
    task.save_final(task.build_model(), out / "mdr_teacher")
    return out / "mdr_teacher"


@pytest.fixture
def strategy(teacher_dir):
    return build_strategy("mdr", teacher=str(teacher_dir))


def reference(teacher_dir, question, turns, turn_text="round"):
    """Q_TE and H_TE computed here from the saved teacher, and eq. 7's index by select_history."""
    teacher = MDRTeacher.load(teacher_dir)
    codec = load_codec(teacher_dir / "tokenizer")
    q_ids, q_mask = pad([codec.encoder_ids(question, MAX_Q)], codec.pad_id)                 # (1, Lq)
    rounds = []
    for prev, turn in zip([None, *turns[:-1]], turns):
        if turn_text == "round" and prev is not None and prev.speaker != turn.speaker:
            rounds.append(codec.round_ids(prev.text, turn.text, MAX_H))
        else:
            rounds.append(codec.encoder_ids(turn.text, MAX_H))
    h_ids, h_mask = pad(rounds, codec.pad_id)                                             # (N, Lh)
    with torch.no_grad():
        q_te = sentence_features(teacher.encoder, q_ids, q_mask)                          # (1, H)
        h_te = sentence_features(teacher.encoder, h_ids, h_mask)                          # (N, H)
    cos = torch.nn.functional.cosine_similarity(h_te, q_te, dim=-1)                       # (N,)
    index, _, has = select_history(q_te, h_te.unsqueeze(0), torch.ones(1, len(turns)))
    assert has.item()
    return cos.numpy(), int(index.item())


@pytest.mark.parametrize("turn_text", ["round", "utterance"])
def test_ranking_is_teacher_cosine_and_top1_is_mdr_selection(teacher_dir, episode, q, fill, turn_text):
    strategy = build_strategy("mdr", teacher=str(teacher_dir), turn_text=turn_text)
    assert isinstance(strategy, MDR) and STRATEGIES["mdr"] is MDR
    fill(strategy, episode)
    items = strategy.retrieve(q(QUESTION), len(strategy))
    turns = [t for s in episode.sessions for t in s.turns]
    cos, index = reference(teacher_dir, QUESTION, turns, turn_text)
    assert len(items) == len(turns) == 9
    position = {t.id: i for i, t in enumerate(turns)}
    got = [position[i.turn_id] for i in items]
    assert got[0] == index                                            # eq. 7: argmax_i cos(Q_TE, H_TE(i))
    assert np.allclose([i.score for i in items], cos[got], atol=1e-5)
    assert got == sorted(range(len(turns)), key=lambda j: -cos[j])    # best first
    assert all(a.score >= b.score for a, b in zip(items, items[1:]))
    assert items[0].session_id == turns[index].id.rsplit(":", 1)[0]


def test_rounds_and_utterances_differ_only_where_a_round_exists(teacher_dir, episode, fill):
    rows = {}
    for mode in ("round", "utterance"):
        s = build_strategy("mdr", teacher=str(teacher_dir), turn_text=mode)
        fill(s, episode)
        rows[mode] = s._vectors
    same = np.isclose(rows["round"], rows["utterance"], atol=1e-6).all(axis=1)
    # every session is Ana, other, Ana: turn 1 opens the session (alone), turns 2 and 3 are rounds
    assert same.tolist() == [True, False, False] * 3


def test_nothing_before_observe_and_only_observed_sessions(strategy, episode, q):
    assert len(strategy) == 0 and strategy.retrieve(q(QUESTION), 5) == []
    assert strategy.context(q(QUESTION), 100) == ""
    strategy.prepare([episode])                          # pure: warms the cache, adds nothing
    assert len(strategy) == 0 and strategy.retrieve(q(QUESTION), 5) == []
    strategy.observe(episode, episode.sessions[0])
    items = strategy.retrieve(q(QUESTION), 10)
    assert len(items) == 3 and {i.session_id for i in items} == {"e1:S1"}
    assert "Biscuit" in strategy.context(q(QUESTION), 200)


def test_prepare_gives_the_same_features_as_observe(teacher_dir, episode, q, fill):
    cold = build_strategy("mdr", teacher=str(teacher_dir), cache_features=False)
    fill(cold, episode)
    warm = build_strategy("mdr", teacher=str(teacher_dir))
    warm.prepare([episode])
    fill(warm, episode)
    assert np.allclose(cold._vectors, warm._vectors, atol=1e-5)
    assert [i.turn_id for i in cold.retrieve(q(QUESTION), 9)] == [i.turn_id for i in warm.retrieve(q(QUESTION), 9)]


def test_forget_and_reset_remove_vectors(strategy, episode, q, fill):
    fill(strategy, episode)
    assert strategy.forget(Selector.of(sessions=["e1:S2"])) == 3
    assert len(strategy) == strategy._vectors.shape[0] == 6
    assert all(i.session_id != "e1:S2" for i in strategy.retrieve(q(QUESTION), 9))
    # forgetting Ben's turns: Ana's replies to them are no longer rounds over Ben's words
    ana_reply = strategy._keys[2]
    assert strategy.forget(Selector.of(turns=["e1:S1:T2", "e1:S3:T2"])) == 2
    assert len(strategy) == strategy._vectors.shape[0] == len(strategy._keys) == 4
    assert strategy._context == [None] * 4
    assert ana_reply not in strategy.teacher.features
    alone = build_strategy("mdr", teacher=strategy.config.teacher, turn_text="utterance")
    fill(alone, episode)
    kept = [j for j, i in enumerate(alone.items) if i.turn_id in {x.turn_id for x in strategy.items}]
    assert np.allclose(strategy._vectors, alone._vectors[kept], atol=1e-5)
    strategy.reset()
    assert len(strategy) == 0 and strategy._vectors.size == 0 and strategy.retrieve(q(QUESTION), 3) == []
    strategy.observe(episode, episode.sessions[2])       # a session can be observed again after reset
    assert len(strategy) == strategy._vectors.shape[0] == 3


def test_missing_teacher(tmp_path):
    nope = str(tmp_path / "nope")
    with pytest.raises(ModelNotTrained) as err:
        build_strategy("mdr", teacher=nope)
    assert err.value.stage == "mdr_teacher" and err.value.path == nope
    with pytest.raises(ModelNotTrained):
        load_teacher_encoder(nope)                          # the lazy loader checks too
    missing = missing_models("mdr", {"teacher": nope})
    assert len(missing) == 1 and missing[0].path == nope and missing[0].stage == "mdr_teacher"
    with pytest.raises(ConfigError, match="trained teacher directory"):
        build_strategy("mdr")
    with pytest.raises(ConfigError, match="trained teacher directory"):
        MDRStrategyConfig(teacher=None)


def test_settings(teacher_dir):
    assert missing_models("mdr", {"teacher": str(teacher_dir)}) == []
    assert MDR.model_settings == {"teacher": "mdr_teacher"}
    assert build_strategy("mdr", teacher=str(teacher_dir), batch_size=2).config.batch_size == 2
    with pytest.raises(ConfigError, match="no setting"):
        build_strategy("mdr", teacher=str(teacher_dir), temperature=1.0)
    with pytest.raises(ConfigError, match="turn_text"):
        build_strategy("mdr", teacher=str(teacher_dir), turn_text="session")
    with pytest.raises(ConfigError, match="batch_size"):
        build_strategy("mdr", teacher=str(teacher_dir), batch_size=0)


def test_limits_and_tokenizer_come_from_the_teacher_directory(strategy, teacher_dir):
    teacher = strategy.teacher
    assert (teacher.config.max_query_tokens, teacher.config.max_history_tokens) == (MAX_Q, MAX_H)
    assert build_strategy("mdr", teacher=str(teacher_dir)).teacher is teacher   # loaded once per process
    assert not teacher.encoder.training and not any(p.requires_grad for p in teacher.encoder.parameters())
    long = Turn(id="x", speaker="Ana", text=" ".join(["Biscuit"] * 100))
    ids, context = strategy._turn_ids(None, long)
    assert len(ids) == MAX_H + 1 and ids[-1] == teacher.codec.eos_id and context is None
    assert len(strategy._query_ids(long.text)) == MAX_Q + 1


def test_small_batches_give_the_same_ranking(teacher_dir, episode, q, fill):
    one = build_strategy("mdr", teacher=str(teacher_dir), batch_size=1, cache_features=False)
    fill(one, episode)
    cos, _ = reference(teacher_dir, QUESTION, [t for s in episode.sessions for t in s.turns])
    assert np.allclose(one._scores(q(QUESTION)), cos, atol=1e-5)
