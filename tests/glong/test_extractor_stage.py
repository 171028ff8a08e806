"""The glong_extractor stage (pipelines/glong/stage.py) from a pretrained base: its datasets (synthetic by episode,
PersonaExt by utterance), the caps, the fine-tuned and zero-shot scores; the small profile's base resolved by name.

The base is ``tiny_llama`` (tests/conftest.py), a stand-in for SmolLM2: a local folder with a chat template, as the
paper profile's models are given. A couple of training steps: the figures are those of a random model, so the tests
check where every figure comes from (the same examples, prompt, parser and base), not how good it is.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from pipelines.data.loaders import get_loader
from pipelines.data.schema import Triplet, write_episodes
from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
from pipelines.glong import stage as S
from pipelines.glong.config import ExtractorTrainConfig
from pipelines.glong.extractor import (ExtractionExample, Parsed, TripletExtractor, evaluate_extractor,
                                       evaluation_examples, normalise_utterance)
from pipelines.glong.tasks import GLongExtractorTask, load_extractor, pretrained_base
from pipelines.runner import StageContext
from pipelines.stages import STAGES

PETS = ["cats", "dogs", "a parrot", "two rabbits", "a horse", "fish", "a turtle", "hamsters"]
JOBS = ["a nurse", "a chef", "a pilot", "a teacher", "a farmer"]


def write_personaext_pairs(path) -> int:
    """PersonaExt's pairs file as published (one {tokens, head, tail, label} a line), an utterance twice."""
    lines = []
    for pet in PETS:
        for job in JOBS:
            tokens = f"i am {job} and i love {pet} .".split()
            tail = list(range(tokens.index("love") + 1, len(tokens) - 1))
            lines.append({"tokens": tokens, "head": [0], "tail": tail, "label": "like_animal"})
    lines.append({"tokens": "i am a chef and i love cats .".split(), "head": [0], "tail": [2, 3],
                  "label": "has_profession"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(PETS) * len(JOBS)


@pytest.fixture
def project(tmp_path):
    """A project root with the synthetic data and PersonaExt ingested (data/canonical/<source>/)."""
    write_splits(generate(SyntheticConfig(episodes=6, sessions=2, turns=6, partners=2, queries_per_session=1)),
                 tmp_path / "data/canonical/synthetic")
    raw = tmp_path / "raw" / "personaext_pairs.jsonl"
    raw.parent.mkdir()
    utterances = write_personaext_pairs(raw)
    write_episodes(tmp_path / "data/canonical/personaext/train.jsonl", get_loader("personaext")(raw).episodes)
    return tmp_path, utterances


def stage_ctx(root, base, **glong) -> StageContext:
    settings = {"sources": ["synthetic", "personaext"], "valid_share": 0.1, "test_share": 0.3,
                "max_train_examples": 12, "max_valid_examples": 4, "eval_examples": 6,
                "extractor": {"model": str(base), "quantize_4bit": False, "lora_r": 4, "lora_alpha": 8,
                              "max_length": 256, "max_new_tokens": 16},
                "extractor_train": {"max_steps": 2, "batch_size": 4, "lr": 1e-3, "eval_every": 1000,
                                    "save_every": 1000, "early_stopping_patience": None}, **glong}
    return StageContext(stage=STAGES["glong_extractor"], config={"profile": "small", "seed": 2022, "glong": settings},
                        root=root)


def test_stage_trains_on_both_datasets_and_scores_the_base_zero_shot_beside_it(project, tiny_llama):
    root, utterances = project
    ctx = stage_ctx(root, tiny_llama)
    result = S.glong_extractor(ctx)
    meta = result.metadata
    # PersonaExt: every utterance once (the one annotated twice merged), split by utterance, no split empty
    split = {s: meta[f"examples/personaext/{s}"] for s in ("train", "valid", "test")}
    assert sum(split.values()) == utterances and all(split.values()), split
    assert meta["examples/synthetic/train"] > 12 and meta["examples/trained"] == 12
    assert meta["examples/validated"] == 4
    assert meta["examples/scored"] == min(6, split["test"]) + 6
    scores = json.loads((root / S.EXTRACTOR / S.EVAL_FILE).read_text())
    assert scores == {k.removeprefix("extraction_"): v for k, v in meta.items() if k.startswith("extraction_")
                      and not k.endswith("_md")}
    assert result.metrics["extraction/personaext/zero_shot/triplet_f1"] == scores["personaext/zero_shot/triplet_f1"]
    for prefix in ("", "zero_shot/", "synthetic/", "personaext/", "synthetic/zero_shot/", "personaext/zero_shot/"):
        parsed = sum(scores[f"{prefix}parse_{s}"] for s in ("valid", "repaired", "dropped"))
        scored = meta["examples/scored"] if prefix in ("", "zero_shot/") else 6 if "synthetic" in prefix \
            else min(6, split["test"])
        assert parsed == scored, prefix
    assert scores["triplet_gold"] == scores["synthetic/triplet_gold"] + scores["personaext/triplet_gold"]
    table = meta["extraction_table_md"]
    assert "| personaext | zero-shot base |" in table and "| all | fine-tuned |" in table
    # The zero-shot rows are the base alone: the same examples, prompt and parser through the pretrained folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    datasets = S._extractor_examples(ctx, include_empty=True)
    held_back = evaluation_examples(datasets["personaext"]["test"], 6)
    base = TripletExtractor(AutoModelForCausalLM.from_pretrained(str(tiny_llama)),
                            AutoTokenizer.from_pretrained(str(tiny_llama)), max_new_tokens=16)
    assert evaluate_extractor(base, held_back) == {k.removeprefix("personaext/zero_shot/"): v
                                                   for k, v in scores.items() if k.startswith("personaext/zero_shot/")}
    # nothing scored was trained on: the held-back utterances are not in PersonaExt's train split
    trained = {normalise_utterance(e.text) for e in datasets["personaext"]["train"]}
    assert not trained & {normalise_utterance(e.text) for e in held_back}


def test_a_saved_extractor_finds_its_base_again_by_name(project, tiny_llama, tmp_path):
    """extractor.json names the pretrained model: a folder copied to another root loads its base again."""
    root, _ = project
    cfg = ExtractorTrainConfig(model=str(tiny_llama), quantize_4bit=False, lora_r=4, max_new_tokens=16)
    examples = [ExtractionExample("a/t0", "speaker", "i love cats .", [])]
    task = GLongExtractorTask(examples, None, cfg, base_dir=tmp_path / "unused")
    assert task.base_path == tiny_llama.resolve() and not (tmp_path / "unused").exists()
    model = task.build_model()
    task.save_final(model, tmp_path / "final")
    meta = json.loads((tmp_path / "final" / "extractor.json").read_text())
    assert (meta["base"], meta["model"]) == (str(tiny_llama.resolve()), str(tiny_llama))
    meta["base"] = str(tmp_path / "moved-away")
    (tmp_path / "final" / "extractor.json").write_text(json.dumps(meta))
    extractor = load_extractor(tmp_path / "final")
    assert extractor.tokenizer.chat_template == task.tokenizer.chat_template
    assert len(extractor([("speaker", "i love cats .")])) == 1


class FakeExtractor:
    """parse() answers by the adapter's state: what the fine-tuned model and the zero-shot base would say."""

    def __init__(self):
        self.adapter = True
        self.model = self

    @contextmanager
    def disable_adapter(self):
        self.adapter = False
        try:
            yield
        finally:
            self.adapter = True

    def parse(self, pairs):
        return [Parsed([Triplet(subject="i", relation="r", object=text)], "valid") if self.adapter
                else Parsed([], "dropped") for _, text in pairs]


def test_scores_by_dataset_and_model():
    def ex(text):
        return ExtractionExample(text, "speaker", text, [Triplet(subject="i", relation="r", object=text)])

    held_back = {"synthetic": [ex("a"), ex("b")], "personaext": [ex("c")]}
    scores = S.extraction_scores_by_source(FakeExtractor(), held_back, zero_shot=True)
    assert (scores["triplet_f1"], scores["zero_shot/triplet_f1"], scores["zero_shot/parse_dropped"]) == (1.0, 0.0, 3.0)
    assert (scores["personaext/triplet_gold"], scores["synthetic/zero_shot/parse_dropped"]) == (1.0, 2.0)
    only = S.extraction_scores_by_source(FakeExtractor(), {"synthetic": held_back["synthetic"]}, zero_shot=False)
    assert sorted(only) == sorted(k for k in scores if "/" not in k)   # the tiny profile's keys: no zero-shot


def test_small_profile_base_resolves_to_the_converted_smollm2(smollm2_models, monkeypatch):
    """``smollm2-135m-instruct`` (the small profile's base) is the shipped GGUF's converted folder, read with its
    own tokenizer and chat template: the paper's prompt as SmolLM2 reads it."""
    monkeypatch.setenv("MNEMOS_LLM_MODELS", str(smollm2_models))
    folder = pretrained_base("smollm2-135m-instruct")
    assert folder == smollm2_models / "smollm2-135m-instruct" and (folder / "config.json").is_file()
    cfg = ExtractorTrainConfig(model="smollm2-135m-instruct", quantize_4bit=False)
    example = ExtractionExample("a/t0", "speaker", "i love cats .",
                                [Triplet(subject="i", relation="like_animal", object="cats")])
    task = GLongExtractorTask([example], None, cfg, base_dir=smollm2_models / "unused")
    item = task.encode(example)
    text = task.tokenizer.decode(item["input_ids"])
    assert text.startswith("<|im_start|>system\nYou are an expert in Knowledge Graph Construction.")
    assert text.endswith('<|im_start|>assistant\n[{"subject": "i", "relation": "like_animal", "object": "cats"}]'
                         "<|im_end|>")
