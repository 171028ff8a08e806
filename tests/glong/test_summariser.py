"""Tests of pipelines/glong/summariser.py: the small profile's decoder-only importance summariser (pairs from
the configured sources, encoding, a few LoRA steps on a tiny stand-in, the saved folder read back)."""

from __future__ import annotations

import json

import pytest
import torch

from pipelines.data.schema import Episode, Session, Triplet, Turn
from pipelines.errors import ConfigError, DataError
from pipelines.glong.config import SummariserTrainConfig
from pipelines.glong.prompts import CAUSAL_SEPARATOR, DIALOGUE_INSTRUCTION, TRIPLETS_INSTRUCTION, summary_prompt
from pipelines.glong.importance import CausalImportanceScorer, load_importance_scorer
from pipelines.glong.summariser import (SUMMARISER_META, CausalSummariserTask, head_tokens,
                                        summariser_pairs)
from pipelines.glong.tasks import IGNORE, SummaryPair, session_summary_pairs
from pipelines.training.engine import TrainConfig, train


def _episode(eid: str, split: str, sessions: int = 2, triplets: bool = True, summary: bool = True) -> Episode:
    """An episode as the loaders write it: "Ana" and "Ben" talk; each session has a summary (LoCoMo's
    session_summary, the synthetic data's) and, when ``triplets``, ground-truth triplets on its first turn."""
    out = []
    for i in range(sessions):
        facts = [Triplet(subject="Ana", relation="moved to", object=f"city {i}"),
                 Triplet(subject="Ana", relation="likes", object="tea")] if triplets else []
        turns = [Turn(id=f"{eid}:s{i}:t0", speaker="Ana", text=f"I moved to city {i} and I like tea.", triplets=facts),
                 Turn(id=f"{eid}:s{i}:t1", speaker="Ben", text="Oh nice, tell me more about it.")]
        out.append(Session(id=f"{eid}:s{i}", index=i, turns=turns,
                           summary=f"Ana told Ben she moved to city {i}." if summary else None))
    return Episode(id=eid, source="fixture", main_speaker="Ana", sessions=out, split=split)


SYNTHETIC = {"train": [_episode("syn-1", "train"), _episode("syn-2", "train")],
             "valid": [_episode("syn-3", "valid")], "test": [_episode("syn-4", "test")]}
# LoCoMo as ingested: one file, every conversation in the test split, summaries but no triplets
LOCOMO = {"test": [_episode(f"conv-{n}", "test", triplets=False) for n in (26, 30, 41)]}


def test_session_pairs_give_the_dialogue_and_the_triplets_as_the_scorer_lays_them_out():
    episode = _episode("e", "train", sessions=1)
    pairs = session_summary_pairs([episode], inputs=("dialogue", "triplets"), separator=CAUSAL_SEPARATOR)
    assert pairs == [
        SummaryPair("e/e:s0", "Ana: I moved to city 0 and I like tea.\nBen: Oh nice, tell me more about it.",
                    "Ana told Ben she moved to city 0."),
        SummaryPair("e/e:s0:triplets", "Ana moved to city 0\nAna likes tea", "Ana told Ben she moved to city 0.",
                    kind="triplets")]
    assert session_summary_pairs([episode]) == pairs[:1]                       # the T5 path's default
    assert session_summary_pairs([_episode("f", "train", triplets=False, summary=False)], ("triplets",)) == []


def test_a_source_without_a_train_split_is_split_by_episode_and_test_splits_stay_unread():
    config = SummariserTrainConfig(arch="causal", inputs=("dialogue", "triplets"), holdout_episodes=1)
    train, valid = summariser_pairs({"synthetic": SYNTHETIC, "locomo": LOCOMO}, config)
    episodes = lambda pairs: sorted({p.id.split("/")[0] for p in pairs})   # noqa: E731
    assert episodes(train) == ["conv-26", "conv-30", "syn-1", "syn-2"]
    assert episodes(valid) == ["conv-41", "syn-3"]                          # LoCoMo's last conversation validates
    assert len(train) == 2 * 2 * 2 + 2 * 2 * 1 and len(valid) == 2 * 2 + 2  # synthetic: dialogue + triplets
    assert "syn-1/syn-1:s0:triplets" in {p.id for p in train}
    capped, few = summariser_pairs({"synthetic": SYNTHETIC, "locomo": LOCOMO},
                                   SummariserTrainConfig(arch="causal", max_train_pairs=3, max_valid_pairs=1,
                                                         holdout_episodes=2))
    assert [p.id for p in capped] == ["syn-1/syn-1:s0", "syn-2/syn-2:s0", "conv-26/conv-26:s0"]
    assert [p.id for p in few] == ["syn-3/syn-3:s0"]


def test_summariser_config_checks_its_values():
    assert SummariserTrainConfig().arch == "seq2seq" and SummariserTrainConfig().inputs == ("dialogue",)
    assert SummariserTrainConfig(inputs=["triplets"], sources=["synthetic", "locomo", "synthetic"]).sources == \
        ("synthetic", "locomo")
    for bad, match in [({"arch": "encoder"}, "arch"), ({"inputs": ["speech"]}, "inputs"),
                       ({"lora_layers": -1}, "lora_layers"), ({"holdout_episodes": -1}, "holdout_episodes"),
                       ({"max_train_pairs": 0}, "max_train_pairs"), ({"sources": [""]}, "sources")]:
        with pytest.raises(ConfigError, match=match):
            SummariserTrainConfig(**bad)


def _config(**kw) -> SummariserTrainConfig:
    values = dict(arch="causal", inputs=("dialogue", "triplets"), max_source_tokens=64, max_target_tokens=16,
                  lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_layers=1)
    return SummariserTrainConfig(**{**values, **kw})


def test_encoding_masks_the_prompt_and_keeps_the_heads(tiny_llama):
    pairs = session_summary_pairs(SYNTHETIC["train"], ("dialogue", "triplets"), CAUSAL_SEPARATOR)
    task = CausalSummariserTask(pairs, None, _config(model=str(tiny_llama), max_source_tokens=256,
                                                     max_target_tokens=64))
    tok = task.tokenizer
    dialogue, triplets = task.encode(pairs[0]), task.encode(pairs[1])
    n_answer = sum(1 for x in dialogue["labels"] if x != IGNORE)
    assert dialogue["labels"] == [IGNORE] * (len(dialogue["labels"]) - n_answer) + dialogue["input_ids"][-n_answer:]
    assert tok.decode(dialogue["input_ids"][-n_answer:]) == pairs[0].summary + tok.eos_token
    assert dialogue["input_ids"][:-n_answer] == \
        tok(summary_prompt(tok, DIALOGUE_INSTRUCTION, pairs[0].dialogue), add_special_tokens=False)["input_ids"]
    # a triplets pair is trained on exactly the prompt the scorer reads for those triplets
    facts = SYNTHETIC["train"][0].sessions[0].turns[0].triplets
    scored = CausalImportanceScorer(None, tok)._serialise(facts, truncate=False)
    assert scored.text == summary_prompt(tok, TRIPLETS_INSTRUCTION, "Ana moved to city 0\nAna likes tea")
    n_answer = sum(1 for x in triplets["labels"] if x != IGNORE)
    assert triplets["input_ids"][:-n_answer] == scored.input_ids
    # a long source keeps its head (max_source_tokens), a long summary its head and EOS (max_target_tokens)
    short = CausalSummariserTask(pairs, None, _config(model=str(tiny_llama), max_source_tokens=12))
    head = head_tokens(tok, pairs[0].dialogue, 12)
    assert pairs[0].dialogue.startswith(head) and len(tok(head, add_special_tokens=False)["input_ids"]) == 12
    item = short.encode(pairs[0])
    n_answer = sum(1 for x in item["labels"] if x != IGNORE)
    assert item["input_ids"][:-n_answer] == \
        tok(summary_prompt(tok, DIALOGUE_INSTRUCTION, head), add_special_tokens=False)["input_ids"]
    long = short.encode(SummaryPair("x", "w", "y " * 40))
    assert len(long["labels"]) - long["labels"].count(IGNORE) == 16 and long["labels"][-1] == tok.eos_token_id
    with pytest.raises(DataError, match="no session with a summary"):
        CausalSummariserTask([], None, _config(model=str(tiny_llama)))


def test_a_few_lora_steps_learn_and_the_saved_summariser_scores_as_trained(tiny_llama, tmp_path):
    pairs = session_summary_pairs(SYNTHETIC["train"], ("dialogue", "triplets"), CAUSAL_SEPARATOR)
    task = CausalSummariserTask(pairs, pairs[:2], _config(model=str(tiny_llama)))
    model = task.build_model()
    adapted = {n.split(".self_attn")[0].split(".mlp")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert adapted == {"base_model.model.model.layers.1"}                 # lora_layers=1: the top block only
    config = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=12, batch_size=4, lr=1e-2, eval_every=100,
                         save_every=100, early_stopping_patience=None, schedule="constant", restore_best=False)
    summary = train(task, config, tracker=None, progress=False)
    losses = [v for _, v in summary.train_losses]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, summary.train_losses
    final = tmp_path / "run" / "final"
    meta = json.loads((final / SUMMARISER_META).read_text())
    assert meta == {"arch": "causal", "base": str(tiny_llama.resolve()), "instruction": TRIPLETS_INSTRUCTION,
                    "separator": "\n", "max_input_tokens": 64, "max_summary_tokens": 16}
    assert (final / "adapter" / "adapter_config.json").is_file()
    assert not (final / "adapter" / "model.safetensors").exists()          # the base is referenced, not copied
    scorer = load_importance_scorer(str(final))
    assert type(scorer) is CausalImportanceScorer and scorer.config.max_summary_tokens == 16
    # the merged, reloaded model computes what the trained adapter computes
    trained = task.build_model()
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(trained, load_file(final / "adapter" / "adapter_model.safetensors"))
    ids = torch.tensor([task.encode(pairs[1])["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(scorer.model(input_ids=ids).logits, trained.eval()(input_ids=ids).logits,
                                   rtol=1e-4, atol=1e-4)
    facts = [t for turn in SYNTHETIC["train"][0].sessions[0].turns for t in turn.triplets]
    scores = scorer(facts)
    assert len(scores) == 2 and max(scores) == 1.0 and min(scores) > 0


def test_the_small_profile_trains_the_causal_summariser_from_smollm2():
    from pipelines.config import PROFILES, SMALL_BASE
    from pipelines.training.config import TrainConfig as Knobs

    glong = PROFILES["small"]["glong"]
    config = SummariserTrainConfig.from_dict(glong["summariser"])
    assert (config.arch, config.model, config.inputs) == ("causal", SMALL_BASE, ("dialogue", "triplets"))
    assert 0 < config.lora_layers < 30 and config.max_train_pairs is not None      # SmolLM2-135M has 30 blocks
    assert Knobs.from_dict(glong["summariser_train"], output_dir="x").epochs == 1
    assert SummariserTrainConfig.from_dict(PROFILES["tiny"]["glong"]["summariser"]).arch == "seq2seq"


# --- the glong_importance stage ---------------------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    """A project root with the synthetic data and a LoCoMo-like dataset (one test file) ingested."""
    from pipelines.data.schema import write_episodes

    for split, episodes in SYNTHETIC.items():
        write_episodes(tmp_path / f"data/canonical/synthetic/{split}.jsonl", episodes)
    write_episodes(tmp_path / "data/canonical/locomo/test.jsonl", LOCOMO["test"])
    return tmp_path


def importance_ctx(root, base, **summariser):
    from pipelines.runner import StageContext
    from pipelines.stages import STAGES

    settings = {"summariser": {"arch": "causal", "model": str(base), "sources": ["synthetic", "locomo"],
                               "inputs": ["dialogue", "triplets"], "max_source_tokens": 48, "max_target_tokens": 8,
                               "lora_r": 4, "lora_alpha": 8, "lora_layers": 1, **summariser},
                "summariser_train": {"max_steps": 2, "batch_size": 4, "lr": 1e-3, "eval_every": 1000,
                                     "save_every": 1000, "early_stopping_patience": None}}
    return StageContext(stage=STAGES["glong_importance"], config={"profile": "small", "seed": 2022, "glong": settings},
                        root=root)


def test_the_stage_trains_on_every_source_and_summarises_the_held_out_sessions(project, tiny_llama):
    from pipelines.glong import stage as S

    result = S.glong_importance(importance_ctx(project, tiny_llama))
    meta = result.metadata
    # synthetic: 2 train episodes x 2 sessions x (dialogue + triplets); LoCoMo: 2 of 3 conversations x 2 sessions
    assert (meta["summary_pairs_train"], meta["summary_pairs_valid"]) == (12, 6)
    assert meta["summary_sources"] == "synthetic,locomo" and meta["final_step"] == 2
    assert 0.0 <= result.metrics["summary_rouge_l"] <= 100.0 and meta["summary_example"].startswith("syn-3/")
    assert type(load_importance_scorer(str(project / S.IMPORTANCE))) is CausalImportanceScorer
    with pytest.raises(ConfigError, match="glong.summariser.sources names 'msc'.*ingest_msc"):
        S.glong_importance(importance_ctx(project, tiny_llama, sources=["synthetic", "msc"]))
