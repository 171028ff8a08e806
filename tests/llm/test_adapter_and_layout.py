"""The local backend with a LoRA adapter over the tiny random Llama (loaded, merged, part of the cache identity), and
the prompt layouts: the plain one for a tokenizer without a chat template (G-Long's extractor's), raw, forced chat."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from pipelines.glong.extractor import SYSTEM_INSTRUCTION, render_prompt, user_message
from pipelines.llm import GenerationSettings, LLMConfig, LLMError, build_llm
from pipelines.llm.base import PLAIN_TEMPLATE, plain_prompt
from pipelines.llm.cache import request_key
from pipelines.llm.local import LocalLLM

S = GenerationSettings(max_new_tokens=8)
MESSAGES = [{"role": "system", "content": SYSTEM_INSTRUCTION},
            {"role": "user", "content": user_message("Ana", "I adopted a greyhound.")}]


def local(tmp_path, model, **kw) -> LocalLLM:
    return LocalLLM(LLMConfig(model=str(model), device="cpu", **kw), tmp_path / "models")


@pytest.fixture(scope="module")
def adapter(tiny_llama, tmp_path_factory):
    """A LoRA adapter on every linear projection of the tiny Llama, saved by peft (B initialised at random, not
    zero, so that it changes the answers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(str(tiny_llama))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 2.0)
    folder = tmp_path_factory.mktemp("adapter") / "lora"
    model.save_pretrained(str(folder))
    return folder


def peft_greedy(tiny_llama, adapter, llm: LocalLLM, messages, max_new_tokens: int) -> str:
    """peft's own (unmerged) adapter over the base, greedy on one conversation."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny_llama)), str(adapter)).eval()
    ids = torch.tensor([llm.encode(messages)])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=max_new_tokens, pad_token_id=llm.tokenizer.pad_token_id)
    return llm.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_an_adapter_is_loaded_merged_and_answers_as_peft_does(tiny_llama, adapter, tmp_path):
    adapted = local(tmp_path, tiny_llama, adapter=str(adapter))
    base = local(tmp_path, tiny_llama)
    got = adapted.generate([MESSAGES], S)[0].text
    assert got == peft_greedy(tiny_llama, adapter, adapted, MESSAGES, S.max_new_tokens)
    assert got != base.generate([MESSAGES], S)[0].text          # the adapter changes the answer
    assert not any("lora" in name for name, _ in adapted.loaded_model().named_parameters())   # merged


def test_the_adapter_is_part_of_the_identity_so_the_cache_never_mixes_adapters(tiny_llama, adapter, tmp_path):
    base, adapted = local(tmp_path, tiny_llama), local(tmp_path, tiny_llama, adapter=str(adapter))
    assert "adapter" not in base.identity()                     # a config without one keeps the keys it had
    assert request_key(base.identity(), MESSAGES, S) != request_key(adapted.identity(), MESSAGES, S)
    other = tmp_path / "other"
    shutil.copytree(adapter, other)
    (other / "adapter_model.safetensors").write_bytes((adapter / "adapter_model.safetensors").read_bytes() + b" ")
    assert local(tmp_path, tiny_llama, adapter=str(other)).identity()["adapter"] != adapted.identity()["adapter"]

    cached = build_llm(LLMConfig(model=str(tiny_llama), device="cpu", adapter=str(adapter)), tmp_path)
    first = cached.generate([MESSAGES], S)[0]
    again = build_llm(LLMConfig(model=str(tiny_llama), device="cpu", adapter=str(adapter)), tmp_path)
    assert again.generate([MESSAGES], S)[0].cached and again.stats()["hits"] == 1
    plain = build_llm(LLMConfig(model=str(tiny_llama), device="cpu"), tmp_path)
    assert not plain.generate([MESSAGES], S)[0].cached and first.text == again.generate([MESSAGES], S)[0].text


def test_a_folder_that_is_no_adapter_is_an_error_naming_it(tiny_llama, tmp_path):
    llm = local(tmp_path, tiny_llama, adapter=str(tmp_path))
    with pytest.raises(LLMError, match=rf"adapter folder {tmp_path} has no adapter_config.json"):
        llm.identity()


@pytest.fixture(scope="module")
def no_template(tiny_llama, tmp_path_factory):
    """The tiny Llama with a tokenizer that has no chat template (as the tiny profile's models)."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("plain") / "model"
    shutil.copytree(tiny_llama, folder)
    for name in ("chat_template.jinja", "chat_template.json"):
        (folder / name).unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert not AutoTokenizer.from_pretrained(str(folder)).chat_template
    return folder


def test_a_tokenizer_without_chat_template_reads_the_plain_layout_of_the_extractor(no_template, tmp_path):
    llm = local(tmp_path, no_template)
    prompt = llm.prompt(MESSAGES)
    assert prompt == PLAIN_TEMPLATE.format(system=SYSTEM_INSTRUCTION, user=MESSAGES[1]["content"])
    assert prompt == render_prompt("Ana", "I adopted a greyhound.")              # what the extractor trains on
    c = llm.generate([MESSAGES], S)[0]
    assert c.prompt_tokens == len(llm.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert llm.count_prompt_tokens(MESSAGES) == c.prompt_tokens
    with pytest.raises(LLMError, match="prompt_format is chat but its tokenizer has no chat template"):
        local(tmp_path, no_template, prompt_format="chat").encode(MESSAGES)


def test_forced_layouts_and_their_identity(tiny_llama, tmp_path):
    plain = local(tmp_path, tiny_llama, prompt_format="plain")
    assert plain.prompt(MESSAGES) == plain_prompt(MESSAGES)                       # a template is there, unused
    raw = local(tmp_path, tiny_llama, prompt_format="raw")
    assert raw.prompt([{"role": "user", "content": "summarize [ABOUT_Ana]: hi"}]) == "summarize [ABOUT_Ana]: hi"
    assert raw.identity()["prompt_format"] == "raw" and "prompt_format" not in local(tmp_path, tiny_llama).identity()
    assert plain_prompt([{"role": "user", "content": "hi"}]) == "### User:\nhi\n### Assistant:\n"


@pytest.mark.parametrize("settings, key, message", [
    ({"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m", "adapter": "a"}, "adapter",
     "a served model's adapter is loaded by the server"),
    ({"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m", "prompt_format": "raw"},
     "prompt_format", "only auto is accepted with the openai backend"),
    ({"prompt_format": "jinja"}, "prompt_format", "choose one of auto, chat, plain, raw"),
    ({"adapter": " "}, "adapter", "give the folder of a peft LoRA adapter"),
    ({"extra_body": {"chat_template_kwargs": {}}}, "extra_body", "the openai backend only"),
    ({"backend": "openai", "base_url": "http://h/v1", "model": "m", "extra_body": ["x"]}, "extra_body",
     "give a mapping"),
])
def test_new_settings_are_checked_naming_the_key(settings, key, message):
    from pipelines.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"^graph\.extractor_llm\.{key} is .*: .*{re.escape(message)}"):
        LLMConfig.from_dict(settings, "graph.extractor_llm")


def test_a_tokenizer_saved_beside_the_adapter_is_the_one_read(tiny_llama, adapter, no_template, tmp_path):
    """The trainers' layout (G-Long's extractor: ``adapter/`` and ``tokenizer/`` side by side): the tokenizer the
    adapter was trained with, here one without a chat template, so the prompt is the plain layout."""
    from transformers import AutoTokenizer

    final = tmp_path / "glong_extractor"
    shutil.copytree(adapter, final / "adapter")
    AutoTokenizer.from_pretrained(str(no_template)).save_pretrained(str(final / "tokenizer"))
    llm = local(tmp_path, tiny_llama, adapter=str(final / "adapter"))
    assert llm.prompt(MESSAGES) == render_prompt("Ana", "I adopted a greyhound.")
    assert local(tmp_path, tiny_llama, adapter=str(adapter)).prompt(MESSAGES) != llm.prompt(MESSAGES)   # template


def test_extra_request_fields_reach_the_server_and_the_identity():
    """Qwen3 served by vLLM, its thinking turned off: the fields go with every request and change the cache key."""
    from pipelines.llm.openai_backend import OpenAILLM

    body = {"chat_template_kwargs": {"enable_thinking": False}}
    llm = OpenAILLM(LLMConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B",
                              extra_body=body))
    assert llm._request(MESSAGES, S)["extra_body"] == body and llm.identity()["extra_body"] == body
    plain = OpenAILLM(LLMConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B"))
    assert "extra_body" not in plain._request(MESSAGES, S) and plain.identity() == {"backend": "openai",
                                                                                   "model": "Qwen/Qwen3-8B"}
