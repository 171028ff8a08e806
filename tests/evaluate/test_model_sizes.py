"""The report header's model sizes: a saved model's config.json, or a LoRA adapter's pretrained base."""

import json
from pathlib import Path

from pipelines.evaluate.stage import _model_sizes


class Ctx:
    def __init__(self, root: Path):
        self.root = root

    def path(self, rel: str) -> Path:
        return self.root / rel


def test_a_saved_model_and_an_adapter_over_a_pretrained_base_are_both_named(tmp_path):
    (tmp_path / "models/mdr_teacher").mkdir(parents=True)
    (tmp_path / "models/mdr_teacher/config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2,
                                                                         "n_embd": 64}))
    base = tmp_path / "cache/smollm2-135m-instruct"
    base.mkdir(parents=True)
    (base / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576}))
    adapter = tmp_path / "models/glong_extractor/adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 64}))
    moved = tmp_path / "models/emma_dialogue/adapter"       # the base folder is gone: named, size unknown
    moved.mkdir(parents=True)
    (moved / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/gone/base-x", "r": 8}))
    sizes = _model_sizes(Ctx(tmp_path))
    assert sizes["mdr_teacher"] == "gpt2 2x64"
    assert sizes["glong_extractor"] == "smollm2-135m-instruct (llama 30x576) + LoRA r64"
    assert sizes["emma_dialogue"] == "base-x + LoRA r8"
    assert sizes["glong_importance"] == "not trained" and sizes["emma_retriever"] == "not trained"
