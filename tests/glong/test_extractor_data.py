"""The extractor's data (pipelines/glong/extractor.py): PersonaExt split by utterance, the training cap, the
held-back selection, the scores with their parse counts."""

from __future__ import annotations

import pytest

from pipelines.glong.config import GLongStageSettings
from pipelines.data.sampling import seeded_sample
from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.glong.extractor import (ExtractionExample, Parsed, evaluation_examples, extraction_scores,
                                       normalise_utterance, sample_datasets, split_by_utterance,
                                       utterance_split)


def T(s, r, o):
    return Triplet(subject=s, relation=r, object=o)


def E(i, text, *triplets):
    return ExtractionExample(f"pairs:{i}/t0", "speaker", text, list(triplets))


# PersonaExt's quirks: punctuation and case tokenised apart ("i love cats ." / "I love cats!"), one utterance
# annotated twice with different triplets.
UTTERANCES = [f"i have {n} dogs and {c} cats ." for n in range(12) for c in range(10)]


def test_normalised_utterance_ignores_case_punctuation_and_spacing():
    assert normalise_utterance("I love  cats!") == normalise_utterance("i love cats .") == "i love cats"
    assert normalise_utterance("my dog's name_is rex") == "my dog s name is rex"


def test_split_is_a_hash_of_the_normalised_utterance():
    """Deterministic across calls and orders, equal for the same utterance written two ways, near the shares."""
    splits = [utterance_split(u, 0.1, 0.2) for u in UTTERANCES]
    assert splits == [utterance_split(u, 0.1, 0.2) for u in UTTERANCES]
    assert utterance_split("I HAVE 3 dogs, and 4 cats!", 0.1, 0.2) == utterance_split(UTTERANCES[34], 0.1, 0.2)
    shares = {s: splits.count(s) / len(splits) for s in ("train", "valid", "test")}
    assert shares["train"] == pytest.approx(0.7, abs=0.1) and shares["test"] == pytest.approx(0.2, abs=0.08)
    assert shares["valid"] > 0
    # a larger held-back share only moves utterances out of train: the test split of 0.2 stays inside that of 0.3
    wider = [utterance_split(u, 0.1, 0.3) for u in UTTERANCES]
    assert all(w == "test" for s, w in zip(splits, wider) if s == "test")


def test_split_by_utterance_never_leaks_and_merges_repeats():
    examples = [E(i, u, T("i", "have_pet", "dogs")) for i, u in enumerate(UTTERANCES)]
    examples.append(E(999, "I have 3 dogs and 4 cats!", T("i", "have_pet", "cats"), T("i", "have_pet", "dogs")))
    parts = split_by_utterance(reversed(examples), valid_share=0.1, test_share=0.2)
    keys = {s: {normalise_utterance(e.text) for e in part} for s, part in parts.items()}
    assert not (keys["train"] & keys["valid"] or keys["train"] & keys["test"] or keys["valid"] & keys["test"])
    assert sum(map(len, parts.values())) == len(UTTERANCES)        # the repeat merged into its utterance
    merged = next(e for part in parts.values() for e in part
                  if normalise_utterance(e.text) == "i have 3 dogs and 4 cats")
    assert (merged.id, merged.triplets) == ("pairs:999/t0", [T("i", "have_pet", "cats"), T("i", "have_pet", "dogs")])
    again = split_by_utterance(examples, valid_share=0.1, test_share=0.2)     # the other order: the same splits
    assert {s: {normalise_utterance(e.text) for e in part} for s, part in again.items()} == keys


def test_training_cap_is_a_seeded_sample_in_order():
    examples = [E(i, u) for i, u in enumerate(UTTERANCES)]
    kept = seeded_sample(examples, 10, seed=7)
    assert len(kept) == 10 and kept == seeded_sample(examples, 10, seed=7)
    assert [examples.index(e) for e in kept] == sorted(examples.index(e) for e in kept)
    assert kept != seeded_sample(examples, 10, seed=8)
    assert kept[-1] is not examples[9]                              # a sample over the whole list, not its head
    assert seeded_sample(examples, None, seed=7) == examples == seeded_sample(examples, 500, seed=7)


def test_training_cap_is_shared_by_the_datasets():
    """PersonaExt's ~19,000 training utterances must not crowd out the synthetic data's ~960."""
    big = [E(i, u) for i, u in enumerate(UTTERANCES)]
    small = [E(500 + i, f"small {i}") for i in range(5)]
    kept = sample_datasets([big, small], 20, seed=3)
    assert kept[:15] == seeded_sample(big, 15, seed=3) and kept[15:] == small    # small gives its share away
    other = [E(700 + i, f"other {i}") for i in range(40)]
    halves = sample_datasets([big, other], 20, seed=3)
    assert halves == seeded_sample(big, 10, seed=3) + seeded_sample(other, 10, seed=3)
    assert sample_datasets([big, small], None, seed=3) == big + small


def test_evaluation_examples_half_with_facts_or_filled_in():
    facts = [E(i, f"fact {i}", T("i", "r", str(i))) for i in range(10)]
    empty = [E(100 + i, f"chat {i}") for i in range(10)]
    picked = evaluation_examples(facts + empty, 6)
    assert [e.text for e in picked] == ["fact 0", "fact 3", "fact 6", "chat 0", "chat 3", "chat 6"]
    assert [e.text for e in evaluation_examples(facts, 4)] == ["fact 0", "fact 2", "fact 5", "fact 7"]
    assert len(evaluation_examples(facts[:2] + empty, 6)) == 6      # few facts: fact-free ones fill in
    assert evaluation_examples(facts[:2], 6) == facts[:2]


def test_scores_with_parse_counts():
    gold = [[T("i", "like_animal", "cats")], [T("i", "own", "car")], []]
    parsed = [Parsed([T("I", "like animal", "Cats")], "valid"), Parsed([T("i", "own", "bike")], "repaired", 1),
              Parsed([], "dropped")]
    assert extraction_scores(parsed, gold) == {
        "triplet_precision": 0.5, "triplet_recall": 0.5, "triplet_f1": 0.5, "triplet_predicted": 2.0,
        "triplet_gold": 2.0, "parse_valid": 1.0, "parse_repaired": 1.0, "parse_dropped": 1.0,
        "parse_items_dropped": 1.0}


@pytest.mark.parametrize("settings, message", [
    ({"test_share": 0.0}, "test_share must lie strictly between 0 and 1"),
    ({"valid_share": 0.5, "test_share": 0.5}, "nothing would be left to train on"),
    ({"max_train_examples": 0}, "glong.max_train_examples must be a positive integer"),
    ({"sources": [""]}, "glong.sources must be a list of dataset names"),
])
def test_stage_settings_are_checked(settings, message):
    with pytest.raises(ConfigError, match=message):
        GLongStageSettings(**settings)
    assert GLongStageSettings(sources=["synthetic", "personaext"], max_train_examples=800).test_share == 0.1
