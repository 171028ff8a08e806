"""Tests of pipelines/glong/extractor.py: prompt, strict parsing, F1, examples, inference."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.data.schema import Episode, Session, Speaker, Triplet, Turn
from pipelines.glong.extractor import (SYSTEM_INSTRUCTION, ParseStats, TripletExtractor,
                                       evaluate_extractor, extraction_examples, normalise,
                                       parse_triplets, render_prompt, target_json, triplet_prf)


def T(s, r, o):
    return Triplet(subject=s, relation=r, object=o)


def test_prompt_is_the_papers():
    prompt = render_prompt("Speaker A", "I love playing tennis on weekends.")
    assert prompt == (
        "### System:\nYou are an expert in Knowledge Graph Construction. Extract (subject, "
        "relation, object) triplets from the text and output them in JSON format.\n"
        "### User:\nExtract triplets from the following dialogue:\n"
        "\"Speaker A: I love playing tennis on weekends.\"\n### Assistant:\n")


def test_prompt_uses_a_chat_template_when_there_is_one():
    class ChatTok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "|".join(f"{m['role']}={m['content']}" for m in messages)

    got = render_prompt("Ana", "Hi.", ChatTok())
    assert got == (f"system={SYSTEM_INSTRUCTION}|user=Extract triplets from the following "
                   "dialogue:\n\"Ana: Hi.\"")


def test_target_json_matches_the_paper_example():
    assert target_json([T("Speaker A", "hobby", "tennis"), T("Speaker B", "hobby", "tennis")]) == (
        '[{"subject": "Speaker A", "relation": "hobby", "object": "tennis"}, '
        '{"subject": "Speaker B", "relation": "hobby", "object": "tennis"}]')
    assert target_json([]) == "[]"


AB = '{"subject": "A", "relation": "r", "object": "B"}'
CASES = [
    ("[]", "valid", [], 0),
    (f"[{AB}]", "valid", ["A r B"], 0),
    (f"  [{AB}, {AB.replace('B', 'C')}]\n", "valid", ["A r B", "A r C"], 0),
    (f"Sure! [{AB},] hope it helps", "repaired", ["A r B"], 0),              # text + comma
    (AB, "repaired", ["A r B"], 0),                                           # bare object
    ("[{'subject': 'A', 'relation': 'r', 'object': 'B'}]", "repaired", ["A r B"], 0),  # quotes
    (f'[{AB}, {{"subject": "C", "rel', "repaired", ["A r B"], 0),            # truncated
    ('[{"subject": "A", "relation": "r", "object": 3}]', "repaired", ["A r 3"], 0),  # scalar
    (f'[{{"subject": "A", "relation": "r"}}, {AB}]', "repaired", ["A r B"], 1),  # bad item
    (f'[{{"subject": " A  x ", "relation": "r", "object": "B"}}]', "valid", ["A x r B"], 0),
    ("The answer is [] as nothing is said.", "repaired", [], 0),
    (f"noise {AB} more noise {AB.replace('A', 'D')}", "repaired", ["A r B", "D r B"], 0),
    ("garbage", "dropped", [], 0),
    ("[[[[[[", "dropped", [], 0),
    ("{}", "dropped", [], 1),
    ("[1, 2]", "dropped", [], 2),
    ('[{"subject": "", "relation": "r", "object": "B"}]', "dropped", [], 1),
    ('"a string"', "dropped", [], 0),
    ("null", "dropped", [], 0),
    ("", "dropped", [], 0),
]


@pytest.mark.parametrize("output, status, texts, bad", CASES)
def test_parse_cases(output, status, texts, bad):
    got = parse_triplets(output)
    assert (got.status, [t.serialise() for t in got.triplets], got.items_dropped) == \
        (status, texts, bad)


def test_parse_deep_nesting_and_non_strings():
    assert parse_triplets("[" * 50_000).status == "dropped"
    assert parse_triplets("{" * 50_000).status == "dropped"
    assert parse_triplets(None).status == "dropped"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_never_raises_on_random_text(text):
    got = parse_triplets(text)
    assert got.status in ("valid", "repaired", "dropped")
    assert all(isinstance(t, Triplet) for t in got.triplets)
    assert (got.status == "dropped") <= (got.triplets == [])


_value = st.one_of(st.text(max_size=8), st.integers(), st.none(), st.booleans(),
                   st.lists(st.text(max_size=3), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["subject", "relation", "object", "x"]), _value),
                max_size=4),
       st.integers(min_value=0, max_value=60))
def test_parse_never_raises_on_mangled_json(items, cut):
    text = json.dumps(items)
    got = parse_triplets(text[:len(text) - cut])   # truncated anywhere
    assert got.status in ("valid", "repaired", "dropped")


def test_parse_stats():
    stats = ParseStats()
    for out in ("[]", "garbage", AB, f'[{{"subject": "A"}}, {AB}]'):
        p = parse_triplets(out)
        stats.add(p.status, p.items_dropped)
    assert stats.to_dict() == {"valid": 1, "repaired": 2, "dropped": 1, "items_dropped": 1}
    assert stats.total == 4


def test_triplet_prf_exact():
    gold = [[T("Juno", "works_at", "a bakery"), T("Juno", "likes", "tea")], [], [T("W", "r", "x")]]
    pred = [[T("juno", "works at", "A  Bakery"), T("Juno", "likes", "coffee")],
            [T("W", "r", "x")], [T("W", "r", "x"), T("W", "r", "x")]]
    s = triplet_prf(pred, gold)
    assert (s.true_positives, s.predicted, s.gold) == (2, 4, 3)
    assert (s.precision, s.recall) == (0.5, 2 / 3)
    assert s.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3), abs=1e-15)
    assert triplet_prf([[]], [[]]).f1 == 0.0
    assert normalise(T(" A ", "has_pet", "Dog")) == ("a", "has pet", "dog")
    with pytest.raises(ValueError, match="2 predicted lists for 1"):
        triplet_prf([[], []], [[]])


def test_examples_from_episodes():
    ep = Episode(id="e1", source="t", main_speaker="Ana", speakers=[Speaker(name="Ana")],
                 sessions=[Session(id="s1", index=0, turns=[
                     Turn(id="t1", speaker="Ana", text="I am a nurse.",
                          triplets=[T("Ana", "has_profession", "nurse")]),
                     Turn(id="t2", speaker="Bo", text="Nice weather.")])])
    ex = extraction_examples([ep])
    assert [(e.id, e.speaker, e.target) for e in ex] == [
        ("e1/t1", "Ana", '[{"subject": "Ana", "relation": "has_profession", "object": "nurse"}]'),
        ("e1/t2", "Bo", "[]")]
    assert [e.id for e in extraction_examples([ep], include_empty=False)] == ["e1/t1"]


class ScriptedLM(torch.nn.Module):
    """A causal "LM" whose generate() appends scripted answer tokens after the prompt."""

    def __init__(self, tokenizer, answers):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.config = type("C", (), {"is_encoder_decoder": False})()
        self.tok, self.answers = tokenizer, list(answers)

    def generate(self, input_ids, attention_mask, **kw):
        assert kw["do_sample"] is False and kw["num_beams"] == 1
        assert (attention_mask[:, -1] == 1).all()          # left padding: prompts end together
        rows = []
        for _ in range(input_ids.shape[0]):
            ids = self.tok(self.answers.pop(0), add_special_tokens=False)["input_ids"]
            rows.append(ids)
        width = max(map(len, rows))
        pad = self.tok.pad_token_id
        new = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], dim=1)


def test_extractor_inference_and_evaluation(bpe_tokenizer):
    answers = ['[{"subject": "ana", "relation": "has_profession", "object": "nurse"}]',
               "not json at all", "[]"]
    ex = TripletExtractor(ScriptedLM(bpe_tokenizer, answers), bpe_tokenizer, batch_size=2)
    examples = extraction_examples([Episode(
        id="e", source="t", main_speaker="Ana", sessions=[Session(id="s", index=0, turns=[
            Turn(id="t1", speaker="Ana", text="I am a nurse.",
                 triplets=[T("Ana", "has_profession", "nurse")]),
            Turn(id="t2", speaker="Bo", text="I have a dog.", triplets=[T("Bo", "has", "dog")]),
            Turn(id="t3", speaker="Ana", text="Nice weather.")])])])
    metrics = evaluate_extractor(ex, examples)
    assert metrics == {"triplet_precision": 1.0, "triplet_recall": 0.5, "triplet_f1": 2 / 3,
                       "triplet_predicted": 1.0, "triplet_gold": 2.0, "parse_valid": 2.0,
                       "parse_repaired": 0.0, "parse_dropped": 1.0, "parse_items_dropped": 0.0}
    assert bpe_tokenizer.padding_side == "right"                 # restored after generation


def test_extractor_truncates_an_over_long_prompt_to_the_model_positions(bpe_tokenizer):
    """A LoCoMo-length utterance must not overflow a small causal LM's position table."""
    lm = ScriptedLM(bpe_tokenizer, ["[]", "[]"])
    lm.config.n_positions = 96
    seen = []
    generate = lm.generate
    lm.generate = lambda input_ids, attention_mask, **kw: (seen.append(input_ids.shape[1]),
                                                            generate(input_ids, attention_mask, **kw))[1]
    ex = TripletExtractor(lm, bpe_tokenizer, max_new_tokens=32, batch_size=2)
    assert ex.max_prompt_tokens == 64
    long = " ".join(["my grandmother's garden had tall sunflowers"] * 80)
    assert ex([("Ana", long), ("Bo", "Short one.")]) == [[], []]
    assert seen == [64]                                             # cut to positions - new tokens
    assert bpe_tokenizer.truncation_side == "right"                 # restored after generation
