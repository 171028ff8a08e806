"""Questions answered per second by the two LLM backends: batched against one at a time, side by side.

    python benchmarks/llm_throughput.py                                    # SmolLM2-135M-Instruct on the CPU
    python benchmarks/llm_throughput.py --questions 64 --batch-size 16 --concurrency 16
    python benchmarks/llm_throughput.py --threads 1 --dtype bfloat16       # CPU settings that may matter
    python benchmarks/llm_throughput.py --backends local --model FOLDER    # any local model folder
    python benchmarks/llm_throughput.py --model FOLDER --questions 4 --max-new-tokens 8 --batch-size 2 \\
        --concurrency 2 --out /tmp/llm.json                                # smoke run (tests/benchmarks)
    python benchmarks/llm_throughput.py --workload product --max-new-tokens 512 --questions 20 \\
        --batch-size 10 --concurrency 10 --server mnemos --dtype bfloat16  # memory products' requests, serve-llm

The questions are what the benchmark's readers ask: a short memory context (six remembered lines with their
session dates, as a strategy's ``context()`` renders them, about 200 tokens with the chat template) and a
question about it, answered greedily in at most ``--max-new-tokens`` (64) tokens; deterministic from ``--seed``.
Nothing is cached (``cache: false``): every question is really generated. ``--workload open`` asks short
questions that want a paragraph instead (decode-bound: where batching pays most), for reference; ``--workload
product`` asks what a memory product asks its model (a whole session of about 1,500 tokens, tool-call JSON wanted:
give ``--max-new-tokens 512``, the products' budget).

- ``local``: :class:`pipelines.llm.local.LocalLLM`, one model loaded once; ``one at a time`` calls ``generate``
  per question, ``batched`` asks all questions in one call (chunks of ``--batch-size``, left-padded, longest
  prompts first). Target: batched >= 3x one at a time.
- ``openai``: :class:`pipelines.llm.openai_backend.OpenAILLM` against ``transformers serve`` of the same model
  folder on a free loopback port (``--continuous-batching`` by default, i.e. server-side batching as vLLM does,
  with a paged KV cache of ``--cb-num-blocks`` pages; ``--no-server-batching`` serves one request at a time), or
  with ``--server mnemos`` this project's ``serve-llm`` (pipelines/llm/batch_server.py: the local backend's padded
  batch of up to ``--concurrency`` requests in flight);
  ``sequential`` is concurrency 1, ``concurrent`` is ``--concurrency``. Target: concurrent >= 3x sequential.

Each side is warmed up (one untimed call) before its timed runs. Reported per run: seconds, questions/s,
completion tokens/s; per pair the speed-up and the share of identical answers (greedy decoding of a padded batch
may differ from the unpadded one in the last float bits). A table, then one JSON line (and ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipelines.llm import GenerationSettings, LLMConfig  # noqa: E402

PEOPLE = ["Alice", "Bob", "Carmen", "Dmitri", "Emeka", "Fatima", "Goro", "Hana"]
PLACES = ["Lisbon", "Osaka", "Nairobi", "Quebec", "Tartu", "Valparaiso", "Hanoi", "Bergen"]
FACTS = [("moved to {place} for a new job", "Where did {who} move?"),
         ("adopted a grey cat called {pet}", "What is the name of {who}'s cat?"),
         ("started learning the {instrument} last spring", "Which instrument is {who} learning?"),
         ("ran a half marathon in {place} in {minutes} minutes", "How long did {who}'s half marathon take?"),
         ("is allergic to {food}", "What is {who} allergic to?"),
         ("booked a trip to {place} with {friend}", "Who is {who} travelling with?")]
PETS, INSTRUMENTS, FOODS = ["Miso", "Pixel", "Biscuit", "Nimbus"], ["cello", "banjo", "oboe", "sitar"], [
    "peanuts", "shellfish", "kiwi", "sesame"]
SYSTEM = ("You are a helpful assistant with a long-term memory of your conversations with the user. Answer the "
          "question from the memories below in one short sentence; say you do not know when they do not tell.")


def make_questions(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` conversations: a system prompt, then six dated memory lines and one question about one of them."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        who = rng.choice(PEOPLE)
        lines, questions = [], []
        for k, (fact, question) in enumerate(rng.sample(FACTS, 6)):
            values = {"who": who, "place": rng.choice(PLACES), "pet": rng.choice(PETS), "food": rng.choice(FOODS),
                      "instrument": rng.choice(INSTRUMENTS), "minutes": rng.randint(95, 150),
                      "friend": rng.choice([p for p in PEOPLE if p != who])}
            day = f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            lines.append(f"[session {k + 1}, {day}] {who}: I {fact.format(**values)}.")
            questions.append(question.format(**values))
        memory = "\n".join(lines)
        out.append([{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Memories:\n{memory}\n\nQuestion: {rng.choice(questions)}\nAnswer:"}])
    return out


TOPICS = ["why people keep diaries", "how a sourdough starter works", "why cats purr", "how tides form",
          "why the sky is blue", "how vaccines train the immune system", "why leaves change colour in autumn",
          "how a bicycle stays upright"]


def make_open_questions(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` short prompts that ask for a paragraph: the regime where batching pays (decode-bound), for reference."""
    rng = random.Random(seed)
    return [[{"role": "user", "content": f"Explain {rng.choice(TOPICS)} in a short paragraph."}] for _ in range(n)]


PRODUCT_SYSTEM = "You are a memory subroutine for an AI."
PRODUCT_TASK = ("You are a long-term memory manager. Extract the facts, preferences and events worth remembering "
                "from the conversation below, then answer with JSON only: {\"tool_calls\": [{\"name\": "
                "\"Memory\", \"arguments\": {\"content\": \"...\"}}]}, one call per memory.")


def make_product_requests(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` requests shaped like a memory product's (LangMem's store manager): instructions, then a whole session
    of about 40 dated turns between two people (about 1,500 prompt tokens), asking for tool-call JSON; with
    ``--max-new-tokens 512`` the product's own budget. Long prompts answered at length: prefill and decode both
    count."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.sample(PEOPLE, 2)
        turns = []
        for _ in range(20):
            for who, other in ((a, b), (b, a)):
                fact, _ = rng.choice(FACTS)
                values = {"who": who, "place": rng.choice(PLACES), "pet": rng.choice(PETS),
                          "food": rng.choice(FOODS), "instrument": rng.choice(INSTRUMENTS),
                          "minutes": rng.randint(95, 150), "friend": other}
                turns.append(f"{who}: You know what, {other}? I {fact.format(**values)}, and honestly it has "
                             f"changed how I spend my weekends more than I expected.")
        day = f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        out.append([{"role": "system", "content": PRODUCT_SYSTEM},
                    {"role": "user", "content": f"{PRODUCT_TASK}\n\n<session date={day}>\n" + "\n".join(turns)
                     + "\n</session>"}])
    return out


WORKLOADS = {"memory_qa": make_questions, "open": make_open_questions, "product": make_product_requests}


def timed(llm, conversations, settings, one_at_a_time: bool) -> dict:
    started = time.perf_counter()
    if one_at_a_time:
        answers = [llm.generate([c], settings)[0] for c in conversations]
    else:
        answers = llm.generate(conversations, settings)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "questions": len(answers), "questions_per_s": len(answers) / seconds,
            "completion_tokens": sum(a.completion_tokens for a in answers),
            "completion_tokens_per_s": sum(a.completion_tokens for a in answers) / seconds,
            "prompt_tokens_mean": sum(a.prompt_tokens for a in answers) / len(answers),
            "texts": [a.text for a in answers]}


def pair(slow: dict, fast: dict) -> dict:
    same = sum(a == b for a, b in zip(slow.pop("texts"), fast.pop("texts"))) / slow["questions"]
    return {"speedup": fast["questions_per_s"] / slow["questions_per_s"], "same_answers": same}


def run_local(args, questions, settings, cache_dir: Path) -> dict:
    from pipelines.llm.config import models_dir
    from pipelines.llm.local import LocalLLM

    def build(batch_size: int) -> LocalLLM:
        cfg = LLMConfig(model=args.model, dtype=args.dtype, device=args.device, batch_size=batch_size, cache=False)
        return LocalLLM(cfg, models_dir(cache_dir))

    batched, single = build(args.batch_size), build(1)
    started = time.perf_counter()
    batched.generate(questions[:1], GenerationSettings(max_new_tokens=2))     # load (and convert) the model
    load_s = time.perf_counter() - started
    one = timed(single, questions, settings, one_at_a_time=True)
    many = timed(batched, questions, settings, one_at_a_time=False)
    return {"load_s": load_s, "dtype": batched.dtype, "device": batched.device, "runs": {
        "one_at_a_time": one, f"batched_{args.batch_size}": many}, **pair(one, many)}


def run_openai(args, questions, settings, cache_dir: Path) -> dict:
    from pipelines.llm.config import models_dir
    from pipelines.llm.local import LocalLLM
    from pipelines.llm.openai_backend import OpenAILLM
    from pipelines.llm.serve import BatchingServerProcess, TransformersServer

    folder = LocalLLM(LLMConfig(model=args.model, cache=False), models_dir(cache_dir)).folder()
    log = Path(tempfile.gettempdir()) / f"llm_throughput_serve_{os.getpid()}.log"
    dtype = args.dtype if args.dtype != "auto" else "float32"
    device = args.device if args.device != "auto" else "cpu"
    if args.server == "mnemos":  # serve-llm: the local backend's padded batches of the requests in flight
        server_cm = BatchingServerProcess(str(folder), name="served", dtype=dtype, device=device,
                                          batch_size=args.concurrency, log=log)
        label = f"mnemos serve-llm --batch-size {args.concurrency}"
    else:
        server_args = ["--dtype", dtype, "--device", device]
        if args.server_batching:  # size the paged KV cache: left to itself it takes most of the RAM (see serve.py)
            server_args += ["--cb-num-blocks", str(args.cb_num_blocks),
                            "--cb-max-batch-tokens", str(args.cb_max_batch_tokens)]
        server_cm = TransformersServer(folder, continuous_batching=args.server_batching, log=log,
                                       extra_args=server_args)
        label = "transformers serve" + (" --continuous-batching" if args.server_batching else "")
    started = time.perf_counter()
    with server_cm as server:
        startup_s = time.perf_counter() - started

        def build(concurrency: int) -> OpenAILLM:
            return OpenAILLM(LLMConfig(backend="openai", model=server.model, base_url=server.base_url,
                                       concurrency=concurrency, cache=False, max_retries=2, timeout_s=600))

        sequential, concurrent = build(1), build(args.concurrency)
        concurrent.generate(questions[:min(len(questions), args.concurrency)], GenerationSettings(max_new_tokens=2))
        seq = timed(sequential, questions, settings, one_at_a_time=True)
        conc = timed(concurrent, questions, settings, one_at_a_time=False)
    log.unlink(missing_ok=True)
    return {"server": label, "startup_s": startup_s,
            "runs": {"sequential": seq, f"concurrent_{args.concurrency}": conc},
            **pair(seq, conc)}


def table(report: dict) -> str:
    rows = ["backend  run               questions  seconds  questions/s  tokens/s  speed-up  same answers"]
    for backend in ("local", "openai"):
        if backend not in report:
            continue
        part = report[backend]
        for k, (name, r) in enumerate(part["runs"].items()):
            extra = f"{part['speedup']:>7.2f}x  {part['same_answers']:>11.0%}" if k else ""
            rows.append(f"{backend:<8} {name:<17} {r['questions']:>9} {r['seconds']:>8.1f} "
                        f"{r['questions_per_s']:>12.2f} {r['completion_tokens_per_s']:>9.1f}  {extra}")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="llm.model of the local backend (and served)")
    p.add_argument("--backends", default="local,openai", help="comma-separated: local, openai")
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="memory_qa",
                   help="memory_qa: the readers' prompts (default); open: short prompts asking for a paragraph; "
                        "product: a memory product's requests (a whole session, tool-call JSON asked)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="local: conversations generated together")
    p.add_argument("--concurrency", type=int, default=16, help="openai: requests in flight")
    p.add_argument("--server", choices=["transformers", "mnemos"], default="transformers",
                   help="openai: the server started: transformers serve (default) or this project's serve-llm "
                        "(batches of up to --concurrency requests in flight)")
    p.add_argument("--no-server-batching", dest="server_batching", action="store_false",
                   help="transformers serve without --continuous-batching (one request at a time on the server)")
    p.add_argument("--cb-num-blocks", type=int, default=64,
                   help="server batching: KV-cache pages of 256 tokens (64: 16k tokens, about 0.75 GB for SmolLM2)")
    p.add_argument("--cb-max-batch-tokens", type=int, default=2048, help="server batching: tokens per forward pass")
    p.add_argument("--dtype", default="auto", help="llm.dtype (auto: float32 on the CPU)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch threads (this process and the server)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "llm",
                   help="where the converted default model is (or goes): <cache-dir>/models")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    if not backends or set(backends) - {"local", "openai"}:
        p.error("--backends names local and/or openai")

    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
        os.environ["OMP_NUM_THREADS"] = str(a.threads)      # the server inherits it
    questions = WORKLOADS[a.workload](a.questions, a.seed)
    settings = GenerationSettings(max_new_tokens=a.max_new_tokens)
    report: dict = {"model": a.model, "workload": a.workload, "questions": a.questions, "max_new_tokens": a.max_new_tokens,
                    "batch_size": a.batch_size, "concurrency": a.concurrency, "threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(), "device": torch.cuda.get_device_name() if torch.cuda.is_available()
                    else "cpu"}
    if "local" in backends:
        report["local"] = run_local(a, questions, settings, a.cache_dir)
    if "openai" in backends:
        report["openai"] = run_openai(a, questions, settings, a.cache_dir)
    print(table(report), flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
