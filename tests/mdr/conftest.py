"""Tiny MDR fixtures: a BPE tokenizer trained here, 2-layer GPT-2 models (64 dims), 4 examples."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import GPT2Config, GPT2LMHeadModel

from pipelines.data.tasks import MDRExample
from pipelines.mdr.config import MDRConfig
from pipelines.mdr.tasks import MDRTeacherTask
from pipelines.mdr.text import Codec

EOS = "<|endoftext|>"

EXAMPLES = [
    MDRExample(persona=["i love dogs.", "i am a nurse."], history=[],
               query="hi there, what do you do?", response="i am a nurse at the hospital.",
               episode_id="e1", session_id="e1:S1", turn_id="t2"),
    MDRExample(persona=["i love dogs.", "i am a nurse."], history=[("hi there, what do you do?", "i am a nurse at the hospital.")],
               query="do you have pets?", response="yes, two dogs.",
               episode_id="e1", session_id="e1:S1", turn_id="t4"),
    MDRExample(persona=[], history=[],
               query="where do you live?", response="i live in oslo.",
               episode_id="e2", session_id="e2:S1", turn_id="t2"),
    MDRExample(persona=["i play chess."], history=[("where do you live?", "i live in oslo."), ("nice city!", "thank you, it is cold.")],
               query="any hobbies?", response="i play chess every day.",
               episode_id="e2", session_id="e2:S2", turn_id="t6"),
]


def _texts() -> list[str]:
    out = []
    for e in EXAMPLES:
        out += [e.query, e.response, *e.persona, *[x for pair in e.history for x in pair]]
    return out


@pytest.fixture(scope="session")
def raw_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_texts(), trainer)
    return tok


@pytest.fixture
def codec(raw_tokenizer) -> Codec:
    return Codec(raw_tokenizer, EOS)


@pytest.fixture
def examples() -> list[MDRExample]:
    return list(EXAMPLES)


@pytest.fixture
def config() -> MDRConfig:
    return MDRConfig(model="tiny", hops=2, max_query_tokens=16, max_response_tokens=16,
                     max_persona_tokens=24, max_history_tokens=24)


@pytest.fixture
def gpt2(codec):
    """A factory of tiny fresh GPT-2 LMs (2 layers, 2 heads, 64 dims), seeded per call."""
    counter = {"n": 0}

    def make() -> GPT2LMHeadModel:
        counter["n"] += 1
        torch.manual_seed(1000 + counter["n"])
        cfg = GPT2Config(vocab_size=codec.vocab_size, n_positions=256, n_embd=64, n_layer=2, n_head=2,
                         bos_token_id=codec.eos_id, eos_token_id=codec.eos_id, pad_token_id=codec.eos_id)
        return GPT2LMHeadModel(cfg)

    return make


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread on the shared 2-core machine; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def teacher(config, codec, examples, gpt2):
    return MDRTeacherTask(config, examples, None, codec, gpt2).build_model().freeze()
