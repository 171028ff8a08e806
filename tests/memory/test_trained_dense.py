"""``trained_dense``: EMMA's dual encoder as a turn retriever that never scores a conversation it trained on."""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines.data import folds as folds_mod
from pipelines.data.schema import Query
from pipelines.emma import retriever as R
from pipelines.errors import ConfigError
from pipelines.memory import STRATEGIES, build_strategy, missing_models
from tests.emma._tiny_retriever import save_tiny_dual_encoder
from tests.emma.conftest import mia_episode

QUESTION = Query(id="q1", question="What did Mia adopt last week?", evidence_turns=["E1:S1:T1"])


def _episode(eid="E1"):
    ep = mia_episode().model_copy(update={"id": eid})
    ep.queries = [QUESTION]
    return ep


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory):
    """The untrained MiniLM dual encoder (both towers MiniLM), saved as emma_retriever saves a model."""
    out = tmp_path_factory.mktemp("retriever") / "emma_retriever"
    R.DualEncoder.from_pretrained(R.RetrieverConfig(memory_max_length=64)).save(out)
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random dual encoder (a stand-in fold model)."""
    return save_tiny_dual_encoder(tmp_path_factory.mktemp("tiny"))


def _main(tmp_path, minilm_dir, trained_on=()):
    main = tmp_path / "emma_retriever"
    main.mkdir()
    for item in minilm_dir.iterdir():     # link the heavy towers, copy the small files
        (main / item.name).symlink_to(item) if item.is_dir() else shutil.copy(item, main / item.name)
    folds_mod.write_trained_on(main, [mia_episode().model_copy(update={"id": e}) for e in trained_on], [])
    return main


def _add_folds(main, tiny_dir, held_out: list[list[str]]):
    folds = main / "folds"
    manifest = {"k": len(held_out), "folds": []}
    for i, held in enumerate(held_out):
        shutil.copytree(tiny_dir, folds / f"fold-{i}")
        others = sorted({e for h in held_out for e in h} - set(held))
        folds_mod.write_trained_on(folds / f"fold-{i}", [mia_episode().model_copy(update={"id": e}) for e in others], [])
        manifest["folds"].append({"fold": i, "path": f"fold-{i}", "held_out": held, "trained_on": others})
    (folds / "folds.json").write_text(json.dumps(manifest))


def _observe_all(strategy, episode):
    for session in episode.sessions:
        strategy.observe(episode, session)


def test_retrieves_the_evidence_turn_with_the_question_and_turn_towers(tmp_path, minilm_dir):
    main = _main(tmp_path, minilm_dir, trained_on=["syn-0001"])
    strategy = build_strategy("trained_dense", model_path=str(main))
    episode = _episode()
    _observe_all(strategy, episode)
    assert strategy.model_for("E1") == main
    [top] = strategy.retrieve(QUESTION, 1)
    assert top.turn_id == "E1:S1:T1" and top.text == "Hi Leo, I adopted a puppy last week."
    # the score is the cosine of E_c(question) and E_m("speaker: text"), the training pairs' rendering
    model = R.DualEncoder.load(main)
    want = model.scores(QUESTION.question, [R.turn_text("Mia", top.text)])[0]
    assert top.score == pytest.approx(float(want), abs=1e-4)
    towers = strategy._loaded[main]
    assert set(towers.vectors["memory"]) == {f"{t.speaker}: {t.text}" for _, t in episode.turns()}


def test_refuses_an_episode_the_model_trained_on(tmp_path, minilm_dir):
    main = _main(tmp_path, minilm_dir, trained_on=["E1"])
    strategy = build_strategy("trained_dense", model_path=str(main))
    with pytest.raises(ConfigError, match="every model trained on episode 'E1'"):
        strategy.observe(_episode(), _episode().sessions[0])
    assert "trained on episode 'E1'" in STRATEGIES["trained_dense"].unavailable([_episode()], {"model_path": str(main)})
    assert STRATEGIES["trained_dense"].unavailable([_episode("E2")], {"model_path": str(main)}) is None


def test_a_model_without_trained_on_is_refused(tmp_path, minilm_dir):
    main = _main(tmp_path, minilm_dir)
    (main / folds_mod.TRAINED_ON).unlink()
    with pytest.raises(ConfigError, match="cannot tell which episodes it trained on"):
        build_strategy("trained_dense", model_path=str(main))


def test_picks_the_fold_model_that_held_the_episode_out(tmp_path, minilm_dir, tiny_dir):
    main = _main(tmp_path, minilm_dir, trained_on=["E1", "E2", "E3"])
    _add_folds(main, tiny_dir, [["E2"], ["E1", "E3"]])
    strategy = build_strategy("trained_dense", model_path=str(main))
    episode = _episode("E1")
    _observe_all(strategy, episode)
    assert strategy.model_for("E1") == main / "folds" / "fold-1"
    assert len(strategy.retrieve(QUESTION, 3)) == 3                   # scored by the tiny fold model
    assert list(strategy._loaded) == [main / "folds" / "fold-1"]      # the main model was never loaded
    strategy.enter(_episode("E2"))
    assert strategy.model_for("E2") == main / "folds" / "fold-0"
    strategy.enter(_episode("E9"))                                     # never trained on: the main model
    assert strategy.model_for("E9") == main


def test_is_missing_until_the_retriever_is_trained(tmp_path):
    from pipelines.evaluate.suite import strategy_defaults

    settings = strategy_defaults(["trained_dense"], tmp_path)["trained_dense"]
    assert settings == {"model_path": str(tmp_path / "models" / "emma_retriever")}
    assert [e.stage for e in missing_models("trained_dense", settings)] == ["emma_retriever"]
