"""LoCoMo's per-session observations as EMMA summarisation examples, from the loader's fixture in the published
shape (tests/data/loaders/fixtures/locomo10_fixture.json: conv-1 has observations, a speaker without any in one
session, an observation whose dia_id is a list, and session summaries; conv-2 has none), and the division of
such episodes into EMMA's splits by emma_examples."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelines.data.loaders import get_loader
from pipelines.emma.formats import FormatConfig, build_examples, has_observations, iter_examples, \
    observation_examples, split_by_episode
from pipelines.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "data" / "loaders" / "fixtures" / "locomo10_fixture.json"


@pytest.fixture(scope="module")
def locomo():
    return get_loader("locomo")(FIXTURE).episodes


def test_a_summary_per_session_and_speaker_targets_its_observations(locomo):
    conv1, conv2 = locomo
    assert has_observations(conv1) and not has_observations(conv2)
    examples = observation_examples(conv1)
    assert [(e.task, e.session_id, e.ref, e.target) for e in examples] == [
        ("summarize", "session_1", "Ana", "Ana went hiking in the Alps."),
        ("summarize", "session_1", "Ben", "Ben has a new puppy."),
        ("summarize", "session_3", "Ana", "Ana moved to Porto."),
        ("summarize", "session_3", "Ben", "[NONE]"),               # Ben's observations of session 3: []
    ]
    # the paper's summarisation source: the whole session in the generation format, no memory block
    first = examples[0].source
    assert first.startswith("summarize [ABOUT_Ana]: [Ana] [Ben] [NOW] first session [Ana] ")
    assert first.endswith(conv1.sessions[0].turns[-1].text)
    # the session summaries (owner Ana, about Ben) are not observations: never a target
    assert not any("talked about" in e.target or "told Ben" in e.target for e in examples)


def test_an_episode_with_observations_gives_summaries_only(locomo):
    conv1, _ = locomo
    examples = build_examples([conv1])
    assert examples == observation_examples(conv1)
    assert build_examples([conv1], FormatConfig(tasks=("generation", "link"))) == []


def test_observations_joined_in_the_summary_target_form(locomo):
    conv1, _ = locomo
    session = conv1.sessions[0]
    extra = session.memories[0].model_copy(update={"id": "session_1:obs:9", "text": "Ana likes rye bread."})
    episode = conv1.model_copy(update={"sessions": [session.model_copy(update={
        "memories": [session.memories[0], extra, *session.memories[1:]]}), *conv1.sessions[1:]]})
    assert observation_examples(episode)[0].target == "Ana went hiking in the Alps. [SEP] Ana likes rye bread."


def test_split_by_episode_is_seeded_and_follows_the_shares():
    ids = [f"conv-{i}" for i in range(10)]
    split = split_by_episode(ids, (0.6, 0.2, 0.2), seed=0)
    assert sorted(split.values()).count("train") == 6 and list(split.values()).count("test") == 2
    assert split == split_by_episode(list(reversed(ids)), (0.6, 0.2, 0.2), seed=0)     # order-free
    assert split != split_by_episode(ids, (0.6, 0.2, 0.2), seed=1)
    assert set(split_by_episode(ids, (0.0, 0.0, 1.0), seed=0).values()) == {"test"}


@pytest.mark.parametrize("shares", [(0.5, 0.5), (0.6, 0.3, 0.3), (1.2, -0.1, -0.1), "0.6,0.2,0.2"])
def test_observation_split_errors(shares):
    with pytest.raises(ConfigError, match="emma.formats.observation_split must be three shares"):
        FormatConfig(observation_split=shares)
    assert FormatConfig(observation_split=[0.5, 0.25, 0.25]).observation_split == (0.5, 0.25, 0.25)


def test_emma_examples_divides_observed_conversations_into_the_splits(locomo, tmp_path):
    """emma.sources [synthetic, locomo]: the synthetic episodes keep their splits; LoCoMo's conversations (one
    published test split) with observations go to train / valid / test by episode; without observations (conv-2)
    they stay in their split; LoCoMo alone (no train split) is enough."""
    from pipelines.data.schema import write_episodes
    from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
    from pipelines.emma.stage import emma_examples

    write_splits(generate(SyntheticConfig(episodes=6, sessions=2, turns=4)), tmp_path / "data/canonical/synthetic")
    conv1, conv2 = locomo
    observed = [conv1.model_copy(update={"id": f"conv-1{i}"}) for i in range(5)]
    write_episodes(tmp_path / "data/canonical/locomo/test.jsonl", [*observed, conv2])
    config = {"emma": {"sources": ["synthetic", "locomo"], "formats": {"observation_split": [0.6, 0.2, 0.2]}}}
    ctx = SimpleNamespace(config=config, path=lambda rel: tmp_path / rel)
    result = emma_examples(ctx)
    split_of = split_by_episode([e.id for e in observed], (0.6, 0.2, 0.2), seed=0)
    rows = {split: list(iter_examples(tmp_path / f"data/tasks/emma/{split}.jsonl")) for split in split_of.values()}
    for split, found in rows.items():
        locomo_ids = {e.episode_id for e in found if e.episode_id.startswith("conv-")}
        assert locomo_ids - {"conv-2"} == {i for i, s in split_of.items() if s == split}
        assert any(not e.episode_id.startswith("conv-") for e in found)                 # synthetic beside
        assert result.metadata[f"{split}_observation_episodes"] == sum(s == split for s in split_of.values())
    assert sorted(split_of.values()) == ["test", "train", "train", "train", "valid"]
    assert all(e.task == "summarize" for found in rows.values() for e in found if e.episode_id.startswith("conv-1"))
    assert "conv-2" in {e.episode_id for e in rows["test"]}                           # no observations: its split
    train = [e for e in rows["train"] if e.episode_id.startswith("conv-1")]
    assert len(train) == 3 * 4 and train[0].target == "Ana went hiking in the Alps."

    config["emma"]["sources"] = ["locomo"]
    emma_examples(ctx)
    assert {e.episode_id for e in iter_examples(tmp_path / "data/tasks/emma/train.jsonl")} == \
        {i for i, s in split_of.items() if s == "train"}
    write_episodes(tmp_path / "data/canonical/locomo/test.jsonl", [conv2])
    with pytest.raises(ConfigError, match=r"emma.sources \['locomo'\] has no train split"):
        emma_examples(ctx)
