"""Sentence encoders and the re-ranker's cross-encoder on every backend x quantization, side by side, on the CPU.

    .venv/bin/python benchmarks/embedding_backends.py [--data LONGMEMEVAL.json] [--locomo LOCOMO.json]
        [--realmem REALMEM_FOLDER] [--n 512]
        [--variants torch:none,onnx:none,onnx:int8,openvino:none,openvino:int8,openvino:int8_weights]
        [--batch-sizes 64] [--queries 20] [--reranker SAVED_RERANKER] [--repeat 3] [--out report.json]

Issue #29, points 1 and 5: embedding at the speed of the hardware. Texts, two kinds:

- ``longmemeval``: user turns as the dense strategy indexes them (``"user: <text>"``): the user turns of ``--data``
  (a LongMemEval-format file, read by the project's loader), or synthetic ones of about 60 words drawn from the word
  list of benchmarks/make_longmemeval_like.py;
- ``locomo``: short chat turns (``"<speaker>: <text>"``): the turns of ``--locomo`` (a LoCoMo file), or synthetic
  ones of about 20 words.

``--n`` distinct texts of each kind (a seeded sample). Every variant (``backend:quantization``, see
:mod:`pipelines.models.embeddings`; onnx ``int8`` is this CPU's dynamic preset, openvino ``int8`` NNCF's static
int8 calibrated on local texts) encodes the same texts with the same batch size; the runs are interleaved (pass 1
of every variant, then pass 2, ...) and a variant's figure is its best pass (on a machine shared with other work,
interference only adds time), with ``texts/cpu-s`` beside (texts per second of this process's CPU time, which other
work on the machine inflates less). ``cos``: the cosine of each text's vector to torch fp32's (min and mean).
The runtimes' idle worker threads (ONNX Runtime's spin, OpenVINO's) can slow the variant that runs after them in the
same process: on 2 AVX-512 cores torch fp32 made 97 texts/s here against 126 alone in a process on the dense
strategy's path; to rank two close variants, run each alone (``--variants torch:none``, then the other).

Cross-encoder: ``--queries`` LoCoMo-like queries (a question of ``--locomo`` and 30 turns of its conversation, or
synthetic; with ``--realmem``, a question of a RealMem persona and 30 turns of its sessions, whose long assistant
turns fill most pairs to the 128 tokens), each a ``depth``-30 re-ranking, scored by: ``torch fp32 padded`` (the
scoring before issue #29: one batch padded to its longest pair), ``torch fp32`` (:meth:`CrossEncoder.score`: pairs tokenized once, sorted by length,
cut into the batches of least padded work), ``onnx fp32`` and ``onnx int8`` (the ONNX Runtime export the ``rerank``
strategy uses on CPUs without native bf16), ``openvino fp32`` and, on a CPU that computes bf16, ``openvino bf16``
(the same export compiled by OpenVINO: the ``rerank`` default on such a CPU). ``ms/query``: the median over queries of each query's best pass; ``max|ds|``: the largest
absolute difference of a score to torch fp32 padded. ``--reranker``: a saved re-ranker (the reranker stage's
output); by default the shipped MiniLM with a new seeded head (the same arithmetic, untrained scores).

Prints the instruction sets the figures ran on (:func:`instruction_sets`: to measure an AVX2 CPU's path on a newer
one, set ``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2`` and read its warning),
two tables, then one JSON line (and ``--out``). No test depends on these figures (tests/benchmarks runs a
tiny smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipelines.models import embeddings as E  # noqa: E402

DEFAULT_VARIANTS = "torch:none,onnx:none,onnx:int8,openvino:none,openvino:int8,openvino:int8_weights"
DEPTH = 30


# --- texts --------------------------------------------------------------------------------------------------------

def _words() -> list[str]:
    """The word list of benchmarks/make_longmemeval_like.py (its synthetic LongMemEval turns)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from make_longmemeval_like import WORDS
    except ImportError:   # the generator moved: the same kind of list
        WORDS = ("the a memory session user assistant travel recipe budget plan garden music movie book doctor "
                 "weekend project deadline friend family city hotel flight price list dinner coffee").split()
    return list(WORDS)


def synthetic_texts(n: int, words: int, speakers: tuple[str, ...], seed: int) -> list[str]:
    """``n`` distinct "speaker: w1 w2 ..." texts of about ``words`` words (+-50 %), seeded."""
    rng, vocab, out = random.Random(seed), _words(), {}
    while len(out) < n:
        k = max(3, int(words * rng.uniform(0.5, 1.5)))
        out[f"{rng.choice(speakers)}: {' '.join(rng.choice(vocab) for _ in range(k))}"] = None
    return list(out)


def file_texts(path: str, source: str, n: int, seed: int, user_only: bool) -> list[str]:
    """``n`` distinct turns of a dataset file, as the dense strategy indexes them ("speaker: text"), seeded."""
    from pipelines.data.loaders import get_loader

    episodes = get_loader(source)(path).episodes
    texts = list(dict.fromkeys(f"{t.speaker}: {t.text}" for e in episodes for _, t in e.turns()
                               if t.text.strip() and (not user_only or t.speaker == "user")))
    random.Random(seed).shuffle(texts)
    return texts[:n]


def rerank_queries(locomo: str | None, n: int, seed: int, realmem: str | None = None
                   ) -> list[tuple[str, list[str]]]:
    """``n`` (question, 30 candidate turns of its conversation) pairs of a RealMem folder, else of a LoCoMo file,
    else synthetic."""
    rng = random.Random(seed)
    if realmem or locomo:
        from pipelines.data.loaders import get_loader

        source, path = ("realmem", realmem) if realmem else ("locomo", locomo)
        pool = [(q.question, [f"{t.speaker}: {t.text}" for _, t in e.turns()])
                for e in get_loader(source)(path).episodes for q in e.queries]
        return [(q, rng.sample(turns, min(DEPTH, len(turns)))) for q, turns in rng.sample(pool, min(n, len(pool)))]
    turns = synthetic_texts(DEPTH * 4, 20, ("Caroline", "Melanie"), seed)
    vocab = _words()
    return [(f"what did Caroline say about the {rng.choice(vocab)} {rng.choice(vocab)}?", rng.sample(turns, DEPTH))
            for _ in range(n)]


# --- timing -------------------------------------------------------------------------------------------------------

def timed(fn):
    """(result, wall seconds, process CPU seconds) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _encode(encoder, items: list[str], batch_size: int, device: str, precision: str) -> np.ndarray:
    """(N, D) vectors: the torch encoder under bf16 / fp16 autocast when the variant asks for it (as
    :class:`Embedder` runs it, on a GPU or, bf16, on a CPU that computes it natively), synchronised on a GPU before
    the clock stops; otherwise plain ``encode``."""
    import contextlib

    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    cast = torch.autocast(kind, dtype=dtype) if dtype else contextlib.nullcontext()
    with cast:
        out = encoder.encode(items, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                             show_progress_bar=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return np.asarray(out, dtype=np.float32)


def embedding_rows(texts: dict[str, list[str]], variants: list[tuple[str, ...]], batch_sizes: list[int],
                   repeat: int, export_dir: str | None, log, device: str = "cpu",
                   encoders: dict | None = None) -> list[dict]:
    """One row per (variant, batch size, text kind): texts/s (best pass), texts/cpu-s, cosine to torch fp32 (on
    the CPU). A variant is ``backend:quantization[:precision]``; precision bf16 / fp16 is torch autocast (bf16 on the CPU
    too: ``torch:none:bf16``), or OpenVINO compiled for bf16 (``openvino:none:bf16``, the CPU default where the CPU
    computes bf16 natively). ``encoders``: a mapping filled with the loaded encoders by variant."""
    encoders, rows = ({} if encoders is None else encoders), []
    for variant in variants:
        backend, quantization = variant[0], variant[1]
        try:
            started = time.perf_counter()
            precision = variant[2] if len(variant) > 2 else "fp32"
            encoders[variant] = E.load_encoder(None, device, backend, quantization, export_dir,
                                               precision if backend == "openvino" else "fp32")
            _encode(encoders[variant], ["warm-up"] * 8, 8, device, precision if backend == "torch" else "fp32")
            log(f"{':'.join(variant)} ready on {device} in {time.perf_counter() - started:.1f} s")
        except Exception as err:   # a missing extra (ConfigError) or a failed export: reported, not fatal
            rows.append({"variant": ":".join(variant), "missing": str(err).splitlines()[0]})
    reference = E.load_encoder(None, "cpu", "torch", "none")
    for kind, items in texts.items():
        ref = reference.encode(items, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False)                                      # (N, D)
        for bs in batch_sizes:
            best: dict = {key: (0.0, 0.0) for key in encoders}
            vectors: dict = {}
            for _ in range(repeat):                       # interleaved: pass r of every variant, then pass r + 1
                for key, encoder in encoders.items():
                    precision = key[2] if len(key) > 2 and key[0] == "torch" else "fp32"   # torch: autocast
                    out, wall, cpu = timed(lambda: _encode(encoder, items, bs, device, precision))
                    vectors[key] = out
                    best[key] = (max(best[key][0], len(items) / wall), max(best[key][1], len(items) / max(cpu, 1e-9)))
            base = best.get(("torch", "none"), best.get(("torch", "none", "fp32"), (float("nan"),)))[0]
            for key, (rate, cpu_rate) in best.items():
                backend, quantization = key[0], key[1]
                cos = (vectors[key] * ref).sum(1)                                                   # (N,)
                rows.append({"variant": ":".join(key), "device": device, "key": E.cache_key(
                             "m", backend, E.resolve_quantization(quantization, backend),
                             key[2] if len(key) > 2 else "fp32").removeprefix("m"),
                             "texts": kind, "batch_size": bs, "n": len(items), "texts_per_s": round(rate, 1),
                             "texts_per_cpu_s": round(cpu_rate, 1), "speedup": round(rate / base, 2),
                             "cos_min": round(float(cos.min()), 4), "cos_mean": round(float(cos.mean()), 5)})
            log(f"{kind} batch {bs}: done")
    return rows


def padded_scores(model, question: str, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """The cross-encoder's scoring before issue #29: batches in the given order, each padded to its longest pair."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            chunk = texts[i:i + batch_size]
            out.append(model(**model.tokenize([question] * len(chunk), chunk)).float())
    return torch.cat(out).numpy()


def rerank_rows(queries: list[tuple[str, list[str]]], reranker: str | None, repeat: int, export_dir: str | None,
                log, device: str = "cpu") -> list[dict]:
    """One row per cross-encoder variant: ms per query (median of each query's best pass), max |score - fp32|."""
    from pipelines.rerank.cross_encoder import CrossEncoder, CrossEncoderConfig, RuntimeCrossEncoder
    from pipelines.rerank.cross_encoder import export_cross_encoder

    with tempfile.TemporaryDirectory() as tmp:
        if reranker is None:
            import torch

            torch.manual_seed(0)
            reranker = str(CrossEncoder.from_pretrained(CrossEncoderConfig()).save(Path(tmp) / "reranker"))
        model = CrossEncoder.load(reranker).eval()
        scorers = {"torch fp32 padded": lambda q, t: padded_scores(model, q, t),
                   "torch fp32": lambda q, t: model.score(q, t)}
        if device.startswith("cuda"):             # the GPU scorer of load_scorer, each precision its own model
            import torch

            for precision in ("fp32", "bf16", "fp16"):
                gpu = CrossEncoder.load(reranker).to(device).eval()
                gpu.inference_precision = precision
                gpu.score("warm-up", ["a pair"] * 4)

                def score(q, t, gpu=gpu):
                    out = gpu.score(q, t)
                    torch.cuda.synchronize()
                    return out
                scorers[f"cuda {precision}"] = score
        runtimes = [("onnx", "none", "fp32"), ("onnx", "int8", "fp32"), ("openvino", "none", "fp32")]
        if E.cpu_computes_bf16():
            runtimes += [("openvino", "none", "bf16")]
        for backend, quantization, precision in runtimes if not device.startswith("cuda") else ():
            name = f"{backend} {'int8' if quantization == 'int8' else precision}"
            try:
                runtime = RuntimeCrossEncoder(export_cross_encoder(reranker, quantization, export_dir), backend,
                                              precision)
                scorers[name] = runtime.score
            except Exception as err:
                log(f"{name}: {str(err).splitlines()[0]}")
        log("cross-encoder variants ready")
        best = {name: [float("inf")] * len(queries) for name in scorers}
        scores = {name: [None] * len(queries) for name in scorers}
        for _ in range(repeat):
            for qi, (question, texts) in enumerate(queries):
                for name, score in scorers.items():       # interleaved per query
                    out, wall, _ = timed(lambda: score(question, texts))
                    best[name][qi] = min(best[name][qi], wall)
                    scores[name][qi] = np.asarray(out, dtype=np.float64)
        ref = np.concatenate(scores["torch fp32 padded"])
        base = statistics.median(best["torch fp32 padded"])
        return [{"variant": name, "queries": len(queries), "pairs": DEPTH,
                 "ms_per_query": round(1000 * statistics.median(ms), 1),
                 "speedup": round(base / statistics.median(ms), 2),
                 "max_abs_diff": float(f"{np.abs(np.concatenate(scores[name]) - ref).max():.3g}")}
                for name, ms in best.items()]


ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def instruction_sets(encoders: dict) -> dict:
    """What instruction sets the figures ran on: the CPU's widest vector ISA (its flags), the caps set in the
    environment, torch's kernel level, and for each OpenVINO variant the kernels one forward pass ran (the CPU
    plugin's profiling: ``exec_type`` per executed node, e.g. ``jit_avx2_f32``, ``brgemm_avx512_f32``,
    ``gemm_mlas_f32``).

    Restricting a newer CPU to AVX2 (issue #48) is partial: ``ONEDNN_MAX_CPU_ISA=AVX2`` caps oneDNN (torch's, and
    the one inside OpenVINO's CPU plugin: its convolutions and eltwise jit kernels), ``MKL_ENABLE_INSTRUCTIONS=AVX2``
    torch's MKL GEMMs, ``ATEN_CPU_CAPABILITY=avx2`` ATen's vectorised loops; but OpenVINO's own jit emitters and the
    MLAS GEMMs of its fully-connected layers (and ONNX Runtime's) choose from cpuid and stay AVX-512: a capped
    figure of those runtimes is an upper bound of an AVX2 CPU's, and ``openvino_kernels`` shows by how much of the
    graph."""
    import torch

    flags = E.cpu_flags()
    widest = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    kernels = {}
    for variant, encoder in encoders.items():
        if getattr(encoder, "backend", None) != "openvino":
            continue
        import openvino as ov

        graph = str(encoder.folder / encoder.meta["file"])
        compiled = ov.Core().compile_model(graph, "CPU", {"PERF_COUNT": "YES", **E.openvino_config(encoder.precision)})
        request = compiled.create_infer_request()
        request.infer(encoder.features(["user: a short text to profile the kernels", "user: another"]))
        counts: dict[str, int] = {}
        for node in request.get_profiling_info():
            if node.status == ov.ProfilingInfo.Status.EXECUTED:
                counts[node.exec_type] = counts.get(node.exec_type, 0) + 1
        kernels[":".join(variant)] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return {"cpu": widest, "caps": {k: os.environ[k] for k in ISA_CAPS if os.environ.get(k)},
            "torch": torch.backends.cpu.get_cpu_capability(), "openvino_kernels": kernels}


def print_isa(isa: dict) -> None:
    caps = ", ".join(f"{k}={v}" for k, v in isa["caps"].items()) or "none"
    print(f"\nInstruction sets: CPU {isa['cpu']}; caps {caps}; torch kernels {isa['torch']}")
    for variant, counts in isa["openvino_kernels"].items():
        wide = sum(n for kind, n in counts.items() if "avx512" in kind or "amx" in kind)
        mlas = sum(n for kind, n in counts.items() if "mlas" in kind)
        print(f"  {variant}: {sum(counts.values())} nodes ran, {wide} on AVX-512/AMX kernels, {mlas} on MLAS GEMMs "
              f"(cpuid-dispatched)")
        if isa["caps"] and (wide or (mlas and isa["cpu"] == "avx512")):
            print(f"  warning: {variant} ran kernels past the cap: its figures are an upper bound of an AVX2 CPU's")


def print_tables(report: dict) -> None:
    print(f"\nSentence encoders on {report.get('device', 'cpu')} (texts/s: best of {report['repeat']} interleaved "
          f"passes; {report['threads']} threads)")
    print(f"{'variant':24s} {'texts':12s} {'batch':>5s} {'texts/s':>8s} {'x torch':>7s} {'texts/cpu-s':>11s} "
          f"{'cos min':>7s} {'cos mean':>8s}")
    for r in report["embeddings"]:
        if "missing" in r:
            print(f"{r['variant']:24s} missing: {r['missing']}")
            continue
        print(f"{r['variant']:24s} {r['texts']:12s} {r['batch_size']:5d} {r['texts_per_s']:8.1f} {r['speedup']:7.2f} "
              f"{r['texts_per_cpu_s']:11.1f} {r['cos_min']:7.4f} {r['cos_mean']:8.5f}")
    print(f"\nCross-encoder ({DEPTH} pairs a query)")
    print(f"{'variant':20s} {'ms/query':>9s} {'x padded':>8s} {'max|ds|':>8s}")
    for r in report["rerank"]:
        print(f"{r['variant']:20s} {r['ms_per_query']:9.1f} {r['speedup']:8.2f} {r['max_abs_diff']:8.3g}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a LongMemEval-format file: its user turns (default: synthetic, ~60 words)")
    parser.add_argument("--locomo", help="a LoCoMo file: its turns and questions (default: synthetic, ~20 words)")
    parser.add_argument("--realmem", help="a RealMem folder: the cross-encoder's queries are its questions and turns "
                                          "(long assistant turns; default: --locomo's)")
    parser.add_argument("--n", type=int, default=512, help="distinct texts of each kind")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="backend:quantization, comma-separated")
    parser.add_argument("--batch-sizes", default="64", help="texts per forward pass, comma-separated")
    parser.add_argument("--queries", type=int, default=20, help="cross-encoder queries of 30 pairs (0: none)")
    parser.add_argument("--reranker", help="a saved re-ranker (default: the shipped MiniLM with a new seeded head)")
    parser.add_argument("--export-dir", help="exported encoders (default: $MNEMOS_ENCODER_DIR or ~/.cache/...)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved passes; a figure is its best pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the torch variants on the GPU (then "
                        "variants such as torch:none:bf16 autocast, and the cross-encoder scores on the GPU too)")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.n < 1:
        parser.error("--repeat and --n must be at least 1")
    device = E.resolve_device(args.device)
    variants = [tuple(v.split(":")) if ":" in v else (v, "none") for v in args.variants.split(",") if v]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    texts = {"longmemeval": (file_texts(args.data, "longmemeval", args.n, args.seed, user_only=True) if args.data
                             else synthetic_texts(args.n, 60, ("user",), args.seed)),
             "locomo": (file_texts(args.locomo, "locomo", args.n, args.seed, user_only=False) if args.locomo
                        else synthetic_texts(args.n, 20, ("Caroline", "Melanie"), args.seed))}
    import torch

    encoders: dict = {}
    report = {"repeat": args.repeat, "threads": torch.get_num_threads(), "int8_preset": E.cpu_int8_preset(),
              "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
              "sources": {"longmemeval": args.data or "synthetic", "locomo": args.locomo or "synthetic",
                          "rerank": args.realmem or args.locomo or "synthetic"},
              "embeddings": embedding_rows(texts, variants, batch_sizes, args.repeat, args.export_dir, log, device,
                                           encoders),
              "rerank": (rerank_rows(rerank_queries(args.locomo, args.queries, args.seed, args.realmem), args.reranker,
                                     args.repeat, args.export_dir, log, device) if args.queries else [])}
    report["isa"] = instruction_sets(encoders)
    print_isa(report["isa"])
    print_tables(report)
    print(json.dumps(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
