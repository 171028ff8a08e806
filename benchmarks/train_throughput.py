"""Training throughput of the MDR stages: mnemos' engine vs a plain Hugging Face Trainer loop.

    python benchmarks/train_throughput.py                      # GPU: the three MDR stages at paper size, batch 32
    python benchmarks/train_throughput.py --stages teacher,lm  # some stages; lm = GPT-2 LM, seq 512, batch 16
    python benchmarks/train_throughput.py --compile false      # the engine without its compiled step
    python benchmarks/train_throughput.py --tiny               # CPU smoke run (tiny GPT-2, short texts)
    python benchmarks/train_throughput.py --stages teacher,lm --varlen --seq-len 128 --batch-size 32 \
        --contenders engine --lever mode=reduce-overhead --lever buckets=64:96:128 --lever pack=256 \
        --lever micro=64x1 --lever micro=32x2 --lever fused=false   # issue #30's levers side by side

Stages (seed 001, section 3): ``teacher`` (Enc_teacher(R) -> R_TE, Dec_teacher(Q, R_TE) -> R, L_teacher),
``student`` (frozen-teacher features of Q, P, H_P and R, student encoder on Q, P and H_P + Memory
Net, L_sentence), ``decoder`` (prefix decoder on R^(K), weights from the frozen teacher's token
features, L_token) and ``lm`` (plain GPT-2 language modelling, the shape of the issue's reference
MFU figures). Each MDR stage trains through its own TrainTask (the real item builders, collate
and loss) on random examples filled to the configured maxima (MDRConfig: Q 64, R 64, P 128 tokens,
32 history rounds of 128), written as words "w<id>" of a word-level tokenizer with GPT-2's
50,257 entries, so every batch has the paper-size shape. Model: GPT-2 124M (12 x 768), no dropout.

- engine: ``pipelines.training.train`` with its own defaults (on CUDA: bf16 autocast, fused AdamW,
  the compiled training step: TrainConfig.compile = auto);
- hf: ``transformers.Trainer`` on the same task's model, collate and loss (compute_loss overridden),
  bf16, its default optimizer; the same batch size and data.

Each contender runs in its own subprocess. The device is synchronised only at the edges of the
timed window (the steps after ``--skip`` warm-up steps: compilation, allocator), never per step,
so the CPU may run ahead of the GPU as in a real run. Reported per contender: steps/s, examples/s,
tokens/s (the stage's own count: target tokens; sentences for the student), input tokens/s (every
id any model reads), model FLOPs per step (torch.utils.flop_counter over one forward + backward of
the stage, frozen-teacher forwards included), MFU = FLOP/s over the device's dense bf16 peak, and
peak memory; then, per stage, the engine/HF ratio of steps/s (the same batches on both sides).
The student stage reads the frozen teacher's features from the table built with its datasets
(mdr.precompute_teacher_features, before the timed window, on both sides); ``--online-teacher``
runs the teacher inside every step instead (the paper-size step is then mostly teacher passes).
``--count-syncs`` (GPU) adds each contender's count of implicit host syncs over its whole run and over its
timed window alone (``timed_syncs``, ``timed_syncs_per_step``):
the engine's should be a few per logged window (reading the window's sums) and none per step.

Levers for the launch-bound shapes (issue #30): each ``--lever SPEC`` is one more engine contender, in its own
process, with some settings changed (several joined by ``+``): ``mode=M`` (TrainConfig.compile_mode, e.g.
reduce-overhead: CUDA graphs), ``buckets=A:B:...`` (length_buckets), ``pack=L`` (pack into rows of L tokens:
the ``lm`` stage with ``--varlen`` only; the MDR stages do not pack, pipelines/mdr/tasks.py says why),
``micro=BxA`` (micro-batch B with A accumulation steps: batch 64 x 1 against 32 x 2 keeps the effective batch),
``fused=true|false`` (fused_optimizer). ``--varlen`` draws every text's length (every lm sequence's) uniformly
from [max/2, max] instead of filling it, so batches pad and vary in shape as real data do. Each lever reports
its examples/s over the plain engine's (``speedup_over_engine``: the comparison that holds across micro-batch
sizes); tokens per step count real target tokens of the task's unpadded batches, the same for every contender,
while the FLOPs per step are the contender's own (a packed batch computes no padding). On the CPU,
``compile: auto`` compiles nothing, so the ``mode`` levers run the eager step there (a smoke run of their
plumbing); with ``--compile true`` a CUDA-graph mode off CUDA is refused by the engine, naming the setting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._contenders import edge_stamps, emit, run_contender  # noqa: E402

# Dense bf16 peak (vendor data sheets, SXM parts), for MFU.
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1, "A40": 149.7}
STAGES = ("teacher", "student", "decoder", "lm")
GPT2_VOCAB = 50257


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --- the stages' tasks on random paper-shaped data ------------------------------------------------

def word_codec(vocab: int):
    """A Codec whose text "w5 w17" is the ids [5, 17]: a word-level tokenizer of ``vocab`` entries, the
    last one GPT-2's <|endoftext|> (eos, sep and pad of MDR's layouts)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    from pipelines.mdr.text import Codec

    words = {f"w{i}": i for i in range(vocab - 1)}
    words["<|endoftext|>"] = vocab - 1
    tok = Tokenizer(WordLevel(words, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return Codec(tok)


def mdr_config(args):
    from pipelines.mdr.config import MDRConfig

    table = {"precompute_teacher_features": not args.online_teacher}
    if args.tiny:
        return MDRConfig(max_query_tokens=12, max_response_tokens=12, max_persona_tokens=16, max_history_tokens=16,
                         max_history_rounds=4, **table)
    return MDRConfig(**table)


def random_examples(n: int, cfg, vocab: int, seed: int, varlen: bool = False):
    """``n`` MDRExamples whose every text fills its token budget (so all batches share one shape), or with
    ``varlen`` has a length drawn uniformly from [budget/2, budget] (batches pad and vary, as real data do)."""
    from pipelines.data.tasks import MDRExample

    rng = random.Random(seed)

    def text(k: int) -> str:
        k = rng.randint(max(1, k // 2), k) if varlen else k
        return " ".join(f"w{rng.randrange(vocab - 1)}" for _ in range(k))

    half = (cfg.max_history_tokens - 1) // 2
    rounds = cfg.max_history_rounds if cfg.max_history_rounds is not None else 32
    return [MDRExample(persona=[text(cfg.max_persona_tokens)],
                       history=[(text(half), text(cfg.max_history_tokens - half)) for _ in range(rounds)],
                       query=text(cfg.max_query_tokens), response=text(cfg.max_response_tokens),
                       episode_id=f"e{i}", session_id=f"s{i}", turn_id=f"t{i}") for i in range(n)]


class LMTask:
    """Plain GPT-2 language modelling on random ids (B, T): the shape of the issue's reference figures."""

    paper = "throughput benchmark (GPT-2 124M language modelling)"

    def __init__(self, args, n: int):
        import torch

        self.args = args
        self.ids = torch.randint(0, args.vocab, (n, args.seq_len), generator=torch.Generator().manual_seed(0))

    def build_model(self):
        from pipelines.models.gpt2 import build_gpt2

        return build_gpt2(gpt2_spec(self.args), self.args.vocab)

    def train_dataset(self):
        return [{"input_ids": row} for row in self.ids]

    def valid_dataset(self):
        return None

    def collate(self, items):
        import torch

        return {"input_ids": torch.stack([it["input_ids"] for it in items])}   # (B, T)

    def compute_loss(self, model, batch):
        ids = batch["input_ids"]
        return model(input_ids=ids, labels=ids).loss, ids.shape[0] * (ids.shape[1] - 1)

    def save_final(self, model, out_dir):
        model.config.save_pretrained(out_dir)   # a throughput run needs no weights


class VarLenLMTask(LMTask):
    """LMTask over sequences of random lengths in [seq_len/2, seq_len] (``--varlen``): padded batches with an
    attention mask and IGNORE labels, bucket-padded ones (length_buckets) or packed rows (pack)."""

    def __init__(self, args, n: int):
        import torch

        super().__init__(args, n)
        g = torch.Generator().manual_seed(1)
        lengths = torch.randint(max(2, args.seq_len // 2), args.seq_len + 1, (n,), generator=g).tolist()
        self.seqs = [row[:k] for row, k in zip(self.ids, lengths)]

    def train_dataset(self):
        return [{"input_ids": seq} for seq in self.seqs]

    def collate(self, items):
        from pipelines.training.packing import pad_causal_lm

        return pad_causal_lm([it["input_ids"] for it in items], pad_id=0)      # (B, T) each

    def pack_collate(self, items, row_tokens):
        from pipelines.training.packing import pack_causal_lm

        return pack_causal_lm([it["input_ids"] for it in items], row_tokens, pad_id=0)   # (R, row_tokens) each

    def sequence_pad_values(self):
        from pipelines.training.packing import causal_lm_pad_values

        return causal_lm_pad_values(pad_id=0)

    def compute_loss(self, model, batch):
        from pipelines.training.packing import causal_lm_loss

        return causal_lm_loss(model, batch)


def gpt2_spec(args):
    from pipelines.models.gpt2 import GPT2_SPECS, GPT2Spec

    base = GPT2Spec(n_layer=2, n_head=2, n_embd=64) if args.tiny else GPT2_SPECS["paper"]
    return GPT2Spec(n_layer=base.n_layer, n_head=base.n_head, n_embd=base.n_embd, n_positions=max(
        args.seq_len, 256), dropout=0.0)


def build_task(stage: str, args):
    """The stage's TrainTask over ``args.batch_size * 4`` random examples (the engine cycles epochs)."""
    import torch

    n = args.batch_size * 4
    if stage == "lm":
        return VarLenLMTask(args, n) if args.varlen else LMTask(args, n)
    from pipelines.mdr.tasks import MDRDecoderTask, MDRStudentTask, MDRTeacherTask, gpt2_factory

    codec, cfg = word_codec(args.vocab), mdr_config(args)
    spec = gpt2_spec(args)

    gpt2 = gpt2_factory(spec, codec)   # the stages' own factory, over a GPT2Spec instead of a profile name
    examples = random_examples(n, cfg, codec.vocab_size, seed=0, varlen=args.varlen)
    if stage == "teacher":
        return MDRTeacherTask(cfg, examples, None, codec, gpt2)
    teacher = MDRTeacherTask(cfg, examples[:1], None, codec, gpt2).build_model()   # random weights, frozen
    if stage == "student":
        return MDRStudentTask(cfg, examples, None, codec, teacher, gpt2)
    features = {e.id: torch.randn(teacher.hidden, generator=torch.Generator().manual_seed(i))
                for i, e in enumerate(examples)}
    return MDRDecoderTask(cfg, examples, None, codec, teacher, features, gpt2)


def batch_counts(stage: str, batch) -> tuple[int, int]:
    """(the stage's tokens, every input id any model reads) of one collated batch."""
    from pipelines.mdr.text import IGNORE

    if stage == "lm" and "labels" not in batch:
        ids = batch["input_ids"]
        return ids.shape[0] * (ids.shape[1] - 1), ids.numel()
    if stage == "lm":   # --varlen: padded
        return int((batch["labels"][:, 1:] != IGNORE).sum()), int(batch["attention_mask"].sum())
    inputs = int(sum(v.sum() for k, v in batch.items() if k.endswith("_mask")))
    if stage == "student":
        return int(batch["q_ids"].shape[0]), inputs
    return int((batch["labels"] != IGNORE).sum()), inputs


def mean_counts(task, stage: str, batch_size: int) -> tuple[float, float]:
    """:func:`batch_counts` averaged over the micro-batches of the training set, from the task's own (unpadded,
    unpacked) collate: the real tokens of a micro-batch, the same for every contender of a stage."""
    data = task.train_dataset()
    counts = [batch_counts(stage, task.collate([data[i] for i in range(k, min(k + batch_size, len(data)))]))
              for k in range(0, len(data), batch_size)]
    return sum(c[0] for c in counts) / len(counts), sum(c[1] for c in counts) / len(counts)


LEVERS = ("mode", "buckets", "pack", "micro", "fused")


def parse_lever(spec: str) -> dict:
    """The TrainConfig settings of a ``--lever`` SPEC ("mode=reduce-overhead+buckets=64:128", "pack=256",
    "micro=64x1", "fused=false"); ValueError names what is wrong."""
    out: dict = {}
    for part in spec.split("+"):
        key, _, value = part.partition("=")
        try:
            if key == "mode":
                out["compile_mode"] = value
            elif key == "buckets":
                out["length_buckets"] = [int(v) for v in value.split(":")]
            elif key == "pack":
                out.update(pack=True, pack_length=int(value))
            elif key == "micro":
                batch, accum = value.split("x")
                out.update(batch_size=int(batch), grad_accum=int(accum))
            elif key == "fused":
                out["fused_optimizer"] = {"true": True, "false": False, "auto": "auto"}[value]
            else:
                raise ValueError(f"unknown lever {key!r} (known: {', '.join(LEVERS)})")
        except (KeyError, ValueError) as err:
            raise ValueError(f"--lever {spec!r}: cannot read {part!r}: {err}") from err
    return out


def lever_skip(stage: str, spec: str, args) -> str | None:
    """Why lever ``spec`` does not apply to ``stage`` (None: it does)."""
    levers = parse_lever(spec)
    if levers.get("pack") and not (stage == "lm" and args.varlen):
        return "packing applies to the lm stage with --varlen only (the MDR stages do not pack: pipelines/mdr/tasks.py)"
    if "length_buckets" in levers and stage == "lm" and not args.varlen:
        return "lm's fixed-length sequences have nothing to pad to buckets: add --varlen"
    return None


def engine_config(args, out: str, levers: dict):
    """The engine's TrainConfig of a contender: the benchmark's run with ``levers`` (parse_lever) changed."""
    from pipelines.training.engine import TrainConfig

    settings = {k: v for k, v in levers.items() if k not in ("batch_size", "grad_accum")}
    return TrainConfig(output_dir=out, lr=1e-4, warmup_steps=0, max_steps=args.steps, batch_size=args.batch_size,
                       grad_accum=args.grad_accum, save_every=10**9, eval_every=10**9, log_every=args.skip,
                       early_stopping_patience=None, keep_checkpoints=1,
                       compile={"auto": "auto", "true": True, "false": False}[args.compile], **settings)


def step_flops(task, batch) -> int:
    """Model FLOPs of one forward + backward of ``task`` on ``batch`` (matmuls and attention)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    device = "cuda" if _cuda() else "cpu"
    model = task.build_model().to(device).train()
    batch = {k: v.to(device) for k, v in batch.items()}
    with FlopCounterMode(display=False) as counter, torch.autocast(device, torch.bfloat16, enabled=_cuda()):
        loss, _ = task.compute_loss(model, batch)
        loss.backward()
    flops = counter.get_total_flops()
    del model, loss
    if _cuda():
        torch.cuda.empty_cache()
    return int(flops)


# --- the two contenders ------------------------------------------------------------------------

def run_engine(task, args, syncs: "SyncCount", levers: dict) -> dict:
    """Steady-state steps/s of the engine: the callback fires at each logged window, right after the
    engine synchronised the device; the first window (``--skip`` steps) is warm-up."""
    import torch

    from pipelines.training.engine import train

    stamps: list[float] = []
    marks: list[int] = []

    def on_log(step, metrics):
        stamps.append(time.perf_counter())
        marks.append(syncs.now())
    with tempfile.TemporaryDirectory() as out:
        cfg = engine_config(args, out, levers)
        if _cuda():
            torch.cuda.reset_peak_memory_stats()
        train(task, cfg, progress=False, callback=on_log)
    timed_steps = args.steps - args.skip    # stamps[0] closes the warm-up window, stamps[-1] the last step
    return {"steps_per_s": timed_steps / (stamps[-1] - stamps[0]), "timed_syncs": marks[-1] - marks[0],
            "log_windows": len(stamps) - 1}


def run_hf(task, args, syncs: "SyncCount") -> dict:
    """Steady-state steps/s of transformers.Trainer, timed from the end of step ``--skip`` to the last."""
    import torch
    from transformers import Trainer, TrainingArguments

    stamps: dict[int, float] = {}
    marks: dict[int, int] = {}

    class StageTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return task.compute_loss(model, inputs)[0]

    cuda = _cuda()
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
                                  gradient_accumulation_steps=args.grad_accum, learning_rate=1e-4, bf16=cuda,
                                  use_cpu=not cuda, report_to="none", save_strategy="no", logging_strategy="no",
                                  dataloader_drop_last=True, seed=2022, remove_unused_columns=False)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer = StageTrainer(model=task.build_model(), args=targs, train_dataset=task.train_dataset(),
                               data_collator=task.collate,
                               callbacks=[edge_stamps(args.skip, args.steps, stamps, marks, syncs.now)])
        trainer.train()
    return {"steps_per_s": (args.steps - args.skip) / (stamps[args.steps] - stamps[args.skip]),
            "timed_syncs": marks[args.steps] - marks[args.skip], "log_windows": 0}


class SyncCount:
    """The implicit syncs torch's sync debug mode has reported so far (:meth:`now`); 0 when not counting."""

    def __init__(self, caught: list | None = None):
        self.caught = caught

    def now(self) -> int:
        return 0 if self.caught is None else sum("synchroniz" in str(w.message) for w in self.caught)


@contextlib.contextmanager
def count_syncs(enabled: bool):
    """The implicit host-device synchronisations (``.item()``, data-dependent shapes, blocking copies)
    of the block, as torch's sync debug mode reports them; explicit torch.cuda.synchronize() calls
    are not counted. Yields a :class:`SyncCount` (always 0 when not ``enabled``): the contenders read it at
    the edges of their timed window, so build, compilation and warm-up are counted apart."""
    import warnings

    import torch

    if not enabled:
        yield SyncCount()
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield SyncCount(caught)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def child(args) -> int:
    import torch

    from pipelines.training.data import training_collate

    torch.backends.cuda.matmul.allow_tf32 = True
    levers = parse_lever(args.lever) if args.lever else {}
    args.batch_size = levers.get("batch_size", args.batch_size)
    args.grad_accum = levers.get("grad_accum", args.grad_accum)
    task = build_task(args.stage, args)
    tokens, inputs = mean_counts(task, args.stage, args.batch_size)   # per micro-batch, unpadded
    flops = None
    if args.only == "engine":   # one micro-batch as this contender collates it (bucket-padded, packed)
        collate = training_collate(task, engine_config(args, "unused", levers))
        flops = step_flops(task, collate([task.train_dataset()[i] for i in range(args.batch_size)]))
    with count_syncs(args.count_syncs and _cuda()) as syncs:
        result = run_engine(task, args, syncs, levers) if args.only == "engine" else run_hf(task, args, syncs)
        total = syncs.now()
    timed, windows = result.pop("timed_syncs"), result.pop("log_windows")
    if args.count_syncs:   # sync debug mode is CUDA-only
        # whole run (build, compilation, warm-up included), and the timed window's, per step: the engine's
        # logging at each of its ``log_windows`` window edges reads the loss once (an explicit, counted read)
        result.update(implicit_syncs=total if _cuda() else None, timed_syncs=timed if _cuda() else None,
                      timed_syncs_per_step=timed / (args.steps - args.skip) if _cuda() else None,
                      log_windows=windows)
    sps, accum = result["steps_per_s"], args.grad_accum   # optimizer steps of batch_size x grad_accum examples
    result.update(stage=args.stage, contender=args.only + (f"[{args.lever}]" if args.lever else ""),
                  settings={k: v for k, v in levers.items() if k not in ("batch_size", "grad_accum")},
                  batch_size=args.batch_size, grad_accum=accum, examples_per_s=sps * args.batch_size * accum,
                  tokens_per_s=sps * tokens * accum, input_tokens_per_s=sps * inputs * accum,
                  tokens_per_step=tokens * accum, input_tokens_per_step=inputs * accum,
                  flops_per_step=flops * accum if flops is not None else None,
                  peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30 if _cuda() else None)
    emit(result)
    return 0


def contender_cmd(stage: str, contender: str, args) -> list[str]:
    """The child invocation of one contender: "engine", "hf", or a lever SPEC (an engine with settings)."""
    only = contender if contender in ("engine", "hf") else "engine"
    cmd = [sys.executable, __file__, "--stage", stage, "--only", only, "--steps", str(args.steps),
           "--skip", str(args.skip), "--seq-len", str(args.seq_len), "--compile", args.compile,
           "--grad-accum", str(args.grad_accum)]
    cmd += ["--lever", contender] if only != contender else []
    cmd += ["--tiny"] if args.tiny else []
    cmd += ["--varlen"] if args.varlen else []
    cmd += ["--online-teacher"] if args.online_teacher else []
    cmd += ["--count-syncs"] if args.count_syncs else []
    cmd += ["--batch-size", str(args.batch_size)] if args.batch_size else []
    return cmd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="teacher,student,decoder", help=f"comma-separated, of {', '.join(STAGES)}")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny GPT-2, short texts, batch 4")
    ap.add_argument("--batch-size", type=int, default=None, help="default: 32 (MDR), 16 for lm, 4 with --tiny")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (engine and hf)")
    ap.add_argument("--seq-len", type=int, default=None, help="lm only (default 512; 64 with --tiny)")
    ap.add_argument("--varlen", action="store_true",
                    help="every text (lm: sequence) of a random length in [max/2, max] instead of filling it")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per contender (a multiple of --skip)")
    ap.add_argument("--skip", type=int, default=None, help="warm-up steps left out of the timing")
    ap.add_argument("--compile", choices=["auto", "true", "false"], default="auto", help="engine: TrainConfig.compile")
    ap.add_argument("--contenders", default="engine,hf", help="the baselines to run: engine, hf or both")
    ap.add_argument("--lever", action="append", default=[], metavar="SPEC",
                    help="one more engine contender with settings changed, e.g. mode=reduce-overhead, "
                         "buckets=64:96:128, pack=256 (lm --varlen), micro=64x1, fused=false; join with +")
    ap.add_argument("--online-teacher", action="store_true",
                    help="student: the frozen teacher runs inside every step (no precomputed feature table)")
    ap.add_argument("--count-syncs", action="store_true",
                    help="GPU: count each contender's implicit host syncs over its run (torch sync debug mode)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device bf16 peak for MFU (default: by name)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    ap.add_argument("--only", choices=["engine", "hf"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.vocab = 512 if args.tiny else GPT2_VOCAB
    args.seq_len = args.seq_len or (64 if args.tiny else 512)
    args.skip = args.skip or (2 if args.tiny else 10)
    args.steps = args.steps or args.skip * (3 if args.tiny else 6)
    if args.steps % args.skip or args.steps <= args.skip:
        ap.error("--steps must be a multiple of --skip and larger than it (the engine times whole windows)")
    if args.only:
        args.lever = args.lever[-1] if args.lever else None
        args.batch_size = args.batch_size or (4 if args.tiny else 16 if args.stage == "lm" else 32)
        return child(args)

    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        ap.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    baselines = [c.strip() for c in args.contenders.split(",") if c.strip()]
    if not baselines or set(baselines) - {"engine", "hf"}:
        ap.error(f"--contenders {args.contenders!r}: choose engine, hf or both")
    for spec in args.lever:   # refuse a bad lever before any contender runs
        from pipelines.training.config import TrainConfig

        try:
            TrainConfig(output_dir="unused", **parse_lever(spec))
        except ValueError as err:   # the spec's, or a setting's ConfigError
            ap.error(str(err))
    device = "cpu"
    if _cuda():
        import torch

        device = torch.cuda.get_device_name()
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device), None)
    report = {"device": device, "peak_bf16_tflops": peak, "stages": {}}
    failed: list[str] = []
    for stage in stages:
        results, skipped = {}, {}
        for contender in baselines + args.lever:
            why = lever_skip(stage, contender, args) if contender not in ("engine", "hf") else None
            if why:
                skipped[contender] = why
                print(json.dumps({"stage": stage, "contender": contender, "skipped": why}), flush=True)
                continue
            res = run_contender(contender_cmd(stage, contender, args))
            if res is None:   # its output is on stderr; the other contenders and stages still run
                failed.append(f"{stage}/{contender}")
                continue
            engine = results.get("engine")   # the baselines run first, the engine before hf
            if contender == "hf" and engine is not None:   # the same batches on both sides
                res["flops_per_step"] = engine["flops_per_step"]
            if peak and device != "cpu" and res["flops_per_step"]:
                res["mfu"] = res["steps_per_s"] * res["flops_per_step"] / (peak * 1e12)
            if contender not in ("engine", "hf") and engine is not None:
                res["speedup_over_engine"] = res["examples_per_s"] / engine["examples_per_s"]
            results[contender] = res
            print(json.dumps(res), flush=True)   # as it finishes: a run cut short keeps what it measured
        summary = {f"speedup[{name}]": res["speedup_over_engine"] for name, res in results.items()
                   if "speedup_over_engine" in res}
        if "hf" in results and "engine" in results:
            summary["ratio_engine_over_hf"] = results["engine"]["steps_per_s"] / results["hf"]["steps_per_s"]
        report["stages"][stage] = {**results, **summary, "skipped": skipped}
        print(json.dumps({"stage": stage, **{k: round(v, 3) for k, v in summary.items()}}), flush=True)
    report["failed"] = failed
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
