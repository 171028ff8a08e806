"""G-Long's extractor on the CPU: QLoRA's 4-bit NF4 base against a full-precision base, training step and inference.

    python benchmarks/extractor_cpu.py                                   # SmolLM2-135M-Instruct, the small profile
    python benchmarks/extractor_cpu.py --personaext ../shared/data/personaext/personaext_pairs.jsonl
    python benchmarks/extractor_cpu.py --variants nf4,fp32 --steps 3 --batch-size 8 --new-tokens 32
    python benchmarks/extractor_cpu.py --model FOLDER --steps 1 --batch-size 2 --new-tokens 4   # smoke run

The paper trains its extractor with QLoRA (a 4-bit NF4 base, double quantisation, LoRA on every linear
projection). On a GPU the 4-bit matmuls save memory at little cost; on a CPU bitsandbytes dequantises each weight
for every matmul, which can cost more than it saves. Variants, each LoRA on all linear projections of the same
base, built by :class:`pipelines.glong.tasks.GLongExtractorTask` as the stage builds it:

- ``nf4``: ``quantize_4bit: true``: the base in 4-bit NF4 (bitsandbytes, compute in fp32 on the CPU);
- ``fp32``: ``quantize_4bit: false``: the base in fp32, the engine's CPU default;
- ``bf16``: ``quantize_4bit: false`` under bf16 autocast (the engine's ``precision: bf16``).

Timed on the same examples (the paper's prompt through the model's chat template, the JSON answer; synthetic
utterances, or PersonaExt's with ``--personaext``): one training step (forward, loss on the answer tokens,
backward, AdamW step) of ``--batch-size`` examples, the median of ``--steps`` after one untimed step; and greedy
generation of exactly ``--new-tokens`` tokens for ``--batch-size`` prompts (left-padded, as the extractor runs),
the median of two after one untimed run. The variants take turns step by step, so that a machine shared with
other jobs slows them alike. A table, then one JSON line (and ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VARIANTS = ("nf4", "fp32", "bf16")


def examples(personaext: str | None, n: int):
    """``n`` extraction examples: PersonaExt's first utterances when given, else the synthetic data's with facts."""
    from pipelines.data.sampling import evenly_spaced
    from pipelines.glong.extractor import extraction_examples

    if personaext:
        from pipelines.data.loaders import get_loader

        episodes = get_loader("personaext")(personaext).episodes
    else:
        from pipelines.data.synthetic import SyntheticConfig, generate

        episodes = generate(SyntheticConfig(episodes=6, sessions=2, turns=8, partners=2, queries_per_session=1))
    return evenly_spaced(extraction_examples(episodes, include_empty=False), n)


def build(variant: str, model: str, train, lora_r: int):
    """The variant's task and LoRA model, as the glong_extractor stage builds them."""
    from pipelines.glong.config import ExtractorTrainConfig
    from pipelines.glong.tasks import GLongExtractorTask

    cfg = ExtractorTrainConfig(model=model, quantize_4bit=variant == "nf4", lora_r=lora_r, lora_alpha=16,
                               lora_dropout=0.1, max_length=256, max_new_tokens=96)
    task = GLongExtractorTask(train, None, cfg, base_dir=Path("/nonexistent"))
    return task, task.build_model()


def autocast(variant: str):
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if variant == "bf16" else contextlib.nullcontext()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="the base (pipelines.llm.config.pretrained_folder)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--personaext", default=None, help="PersonaExt's pairs file (default: synthetic utterances)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="timed training steps per variant (after one untimed)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--lora-r", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    from pipelines.glong.extractor import render_prompt

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose among {', '.join(VARIANTS)}")
    torch.manual_seed(0)
    train = examples(args.personaext, args.batch_size)
    built = {v: build(v, args.model, train, args.lora_r) for v in variants}
    batch = next(iter(built.values()))[0].collate([built[variants[0]][0].encode(e) for e in train])
    tok = built[variants[0]][0].tokenizer
    tok.padding_side = "left"
    prompts = tok([render_prompt(e.speaker, e.text, tok) for e in train], return_tensors="pt", padding=True)
    optimizers = {v: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
                  for v, (_, m) in built.items()}
    step_s: dict[str, list[float]] = {v: [] for v in variants}
    gen_s: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(args.steps + 1):                       # rep 0: untimed warm-up
        for v in variants:
            task, model = built[v]
            model.train()
            started = time.perf_counter()
            with autocast(v):
                loss, _ = task.compute_loss(model, batch)
            loss.backward()
            optimizers[v].step()
            optimizers[v].zero_grad(set_to_none=True)
            if rep:
                step_s[v].append(time.perf_counter() - started)
            print(f"step {rep} {v}: {time.perf_counter() - started:.1f} s (loss {loss.item():.3f})", flush=True)
    for rep in range(3):
        for v in variants:
            model = built[v][1].eval()
            started = time.perf_counter()
            with torch.no_grad(), autocast(v):
                model.generate(**prompts, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                               do_sample=False, num_beams=1, pad_token_id=tok.pad_token_id)
            if rep:
                gen_s[v].append(time.perf_counter() - started)
            print(f"generate {rep} {v}: {time.perf_counter() - started:.1f} s", flush=True)
    tokens = int(batch["attention_mask"].sum())
    result = {"model": args.model, "batch_size": args.batch_size, "tokens_per_batch": tokens,
              "new_tokens": args.new_tokens, "threads": torch.get_num_threads(), "lora_r": args.lora_r,
              "data": "personaext" if args.personaext else "synthetic", "variants": {}}
    print(f"\n{args.model}: batch of {args.batch_size} examples ({tokens} tokens), {torch.get_num_threads()} threads")
    print(f"| variant | train step s | train tokens/s | generate {args.new_tokens} tokens s | new tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for v in variants:
        step, gen = statistics.median(step_s[v]), statistics.median(gen_s[v])
        result["variants"][v] = {"train_step_s": step, "train_tokens_per_s": tokens / step, "generate_s": gen,
                                 "generate_tokens_per_s": args.batch_size * args.new_tokens / gen,
                                 "train_step_all_s": step_s[v], "generate_all_s": gen_s[v]}
        print(f"| {v} | {step:.2f} | {tokens / step:.0f} | {gen:.2f} | {args.batch_size * args.new_tokens / gen:.1f} |")
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
