"""Faults under load and at the edges of a sharded benchmark, through real processes (issue #48, point 5).

- A shard whose ``--out`` cannot be written (a path under a regular file, a read-only folder, a full disk: a test
  double that fails every write under ``--out`` with ENOSPC once the "disk" is full, as no test can fill a real one)
  ends in one ``error:`` line naming the path and the cause, exit 8, no traceback; the episodes it finished stay in
  its ``episodes.jsonl`` (a rerun on a disk still full loses none), and the same command, once there is room, goes on
  after them and runs only the others.
- Twenty shards of one run share one language-model server (the project's ``serve-llm``,
  :class:`~pipelines.llm.batch_server.BatchingServer`, over a model that answers at once and counts every prompt it
  is asked) and one response cache (``--llm-cache-dir``); one shard is killed (SIGKILL) while a request of its is in
  flight, restarted, killed again after its first finished episode and restarted again. The merge reports what an
  unsharded run reports, and the server answered every prompt once, but the one in flight at the kill: a request
  sent and not answered when its process died has no answer to keep, and is asked again (only it). Nothing answered
  and cached is ever asked again.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipelines.llm.base import LLM, Completion
from pipelines.llm.batch_server import BatchingServer
from pipelines.llm.cache import ResponseCache
from tests._cli import REPO, run_cli, tmp_project
from tests.test_cli_shards import _one_line_error, _report

SMALL = ["--set", "synthetic.episodes=30", "--set", "synthetic.sessions=3"]  # 5 test episodes: 3 in shard 0-of-2
SLOW_CLI = REPO / "tests" / "evaluate" / "slow_benchmark_cli.py"


def _bench(out: Path) -> list[str]:
    """Shard 0 of 2 (episodes 0, 2 and 4) of a small synthetic run, into ``out``."""
    return ["benchmark", "--suite", "synthetic", "--strategies", "no_history,bm25", "--out", str(out), "--no-answers",
            "-q", *SMALL, "--shards", "2", "--shard", "0"]


def _env(root: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, MNEMOS_ROOT=str(root), PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false",
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True) if path.is_file() else []


def _whole_lines(path: Path) -> list[str]:
    """The lines of ``path`` written whole: what a shard counts as finished. A line seen without its newline is
    still being written (a record is several kB, more than a page): a SIGKILL then can stop the write at a page and
    leave the line torn, which the next run cuts off."""
    return [line for line in _lines(path) if line.endswith("\n")]


# --- an --out that cannot be written ---------------------------------------------------------------------------

FULL_DISK = '''"""python -m pipelines ARGS on a disk that fills up: a test double. The files written under
FULL_DISK_UNDER (opened through io.open: Path.open, and os.fdopen of the files mkstemp makes) count the episode lines
written to them; once FULL_DISK_ROOM of them were written in this process (0: full from the start; -1: never full),
every write under that folder fails with ENOSPC, as on a full disk. At exit, the episode lines written go to stderr."""
import atexit, errno, io, os, sys, tempfile

sys.path.insert(0, {repo!r})
UNDER = os.path.realpath(os.environ["FULL_DISK_UNDER"]) + os.sep
ROOM = int(os.environ["FULL_DISK_ROOM"])
written = [0]
temporary = {{}}   # fd -> path of the files mkstemp made (atomic writes open them by fd)
real_open, real_mkstemp = io.open, tempfile.mkstemp


def mkstemp(*args, **kwargs):
    fd, path = real_mkstemp(*args, **kwargs)
    temporary[fd] = os.path.realpath(path)
    return fd, path


class OnFullDisk:
    def __init__(self, f, name):
        self._f, self._name = f, name

    def write(self, text):
        if ROOM >= 0 and written[0] >= ROOM:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self._f.write(text)
        if self._name.endswith("episodes.jsonl"):
            written[0] += text.count("\\n") if isinstance(text, str) else text.count(b"\\n")
        return n

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def open_on_disk(file, mode="r", *args, **kwargs):
    f = real_open(file, mode, *args, **kwargs)
    name = temporary.pop(file, "") if isinstance(file, int) else os.path.realpath(os.fspath(file))
    return OnFullDisk(f, name) if name.startswith(UNDER) and any(m in mode for m in "wax+") else f


io.open, tempfile.mkstemp = open_on_disk, mkstemp
atexit.register(lambda: print(f"full disk: {{written[0]}} episode line(s) written", file=sys.stderr))

from pipelines.cli import main  # noqa: E402

raise SystemExit(main(sys.argv[1:]))
'''


def _on_full_disk(tmp_path: Path, root: Path, out: Path, room: int) -> subprocess.CompletedProcess:
    """The shard of :func:`_bench` on a disk with room for ``room`` more episode lines under ``out`` (-1: roomy)."""
    script = tmp_path / "full_disk_cli.py"
    script.write_text(FULL_DISK.format(repo=str(REPO)), encoding="utf-8")
    return subprocess.run([sys.executable, str(script), *_bench(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_env(root, FULL_DISK_UNDER=str(out), FULL_DISK_ROOM=str(room)))


def test_an_out_that_cannot_be_made_is_one_line_naming_it(tmp_path):
    """A path under a regular file (ENOTDIR, whoever runs it) and, but for root (whom no mode stops), a read-only
    folder (EACCES): exit 8, one error line naming the shard's folder and the cause, nothing written."""
    root = tmp_project(tmp_path / "project")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    cases = [(blocker / "out", "Not a directory")]
    if os.geteuid() != 0:
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o555)
        cases.append((locked / "out", "Permission denied"))
    for out, cause in cases:
        proc = run_cli(_bench(out), root)
        _one_line_error(proc, str(out / "shards" / "synthetic" / "0-of-2"), cause)
        assert "hint: " in proc.stderr
        assert not out.exists()


def test_a_full_disk_keeps_the_finished_episodes_and_the_same_command_resumes(tmp_path):
    """The disk fills after the shard's second episode (of three): one error line naming episodes.jsonl and the
    cause, the two episodes kept whole. Run again on the disk still full (or, but for root, with the folder made
    read-only) it fails the same way and loses none of them; with room, it goes on after them: one episode runs."""
    root = tmp_project(tmp_path / "project")
    out = tmp_path / "out"
    folder = out / "shards" / "synthetic" / "0-of-2"
    episodes = folder / "episodes.jsonl"
    proc = _on_full_disk(tmp_path, root, out, room=2)
    error = _one_line_error(proc, str(episodes), os.strerror(errno.ENOSPC))
    assert "2 finished episode(s)" in error
    kept = _lines(episodes)
    assert [json.loads(line)["position"] for line in kept] == [0, 2]
    assert not json.loads((folder / "manifest.json").read_text())["complete"]

    still = _on_full_disk(tmp_path, root, out, room=0)
    _one_line_error(still, str(folder / "manifest.json"), os.strerror(errno.ENOSPC))
    assert _lines(episodes) == kept, "a rerun on a full disk lost finished episodes"
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            locked = run_cli(_bench(out), root)
        finally:
            folder.chmod(0o755)
        _one_line_error(locked, str(folder / "manifest.json"), "Permission denied")
        assert _lines(episodes) == kept
    assert not list(folder.glob(".*.tmp")), "a failed write left its temporary file"

    again = _on_full_disk(tmp_path, root, out, room=-1)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming after 2 finished episode(s)" in again.stderr
    assert "full disk: 1 episode line(s) written" in again.stderr     # only the episode left ran
    lines = _lines(episodes)
    assert lines[:2] == kept and [json.loads(line)["position"] for line in lines] == [0, 2, 4]
    assert json.loads((folder / "manifest.json").read_text())["complete"]


# --- twenty shards, one server, one response cache, one shard killed -------------------------------------------

SHARDS, VICTIM = 20, 7
LLM_SMALL = ["--set", "synthetic.episodes=40", "--set", "synthetic.sessions=2", "--set", "synthetic.turns=4",
             "--set", "synthetic.train_fraction=0", "--set", "synthetic.valid_fraction=0",
             "--set", "synthetic.test_fraction=1"]   # 40 episodes, 2 a shard, 80 sessions of distinct dialogues


class Counting(LLM):
    """The served model: a session's "summary" is its dialogue (the prompt but its date line), answered at once;
    every prompt asked is counted. With ``hold_after`` n, the prompts asked once n were answered wait for
    ``release`` (``holding`` set, the prompt in ``held``)."""

    backend = "counting"

    def __init__(self):
        self.asked: collections.Counter[str] = collections.Counter()
        self.answered = 0
        self.hold_after: int | None = None
        self.held: list[str] = []
        self.holding, self.release = threading.Event(), threading.Event()
        self.lock = threading.Lock()

    @property
    def model(self) -> str:
        return "counting"

    def identity(self) -> dict:
        return {"backend": self.backend}

    def generate(self, batch, settings, progress=None):
        out = []
        for messages in batch:
            prompt = messages[-1]["content"]
            with self.lock:
                self.asked[prompt] += 1
                hold = self.hold_after is not None and self.answered >= self.hold_after
                if hold:
                    self.held.append(prompt)
            if hold:
                self.holding.set()
                self.release.wait(120)
            text = "\n".join(prompt.splitlines()[1:])
            with self.lock:
                self.answered += 1
            out.append(Completion(text=text, prompt_tokens=len(prompt.split()), completion_tokens=len(text.split())))
        return out


def _wait(condition, what: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"the shard ended before {what}: " + log.read_text()[-3000:]
        assert time.time() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def test_twenty_shards_on_one_server_with_one_killed_ask_nothing_answered_twice(tmp_path):
    """20 shards (a synthetic run of 40 episodes, 2 sessions each: 4 summaries a shard) against one serve-llm and one
    response cache, shard 7 killed in its requests and in its episodes; see the module docstring."""
    root = tmp_project(tmp_path / "project")
    model = Counting()
    started: list[subprocess.Popen] = []
    with BatchingServer(model, "counting", port=0, batch_size=4, gather_s=0.01) as server:
        try:
            _twenty_shards(tmp_path, root, model, server, started)
        finally:
            model.release.set()      # a held request never keeps the server from stopping
            for proc in started:     # nor a shard left running by a failed assertion
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def _twenty_shards(tmp_path: Path, root: Path, model: Counting, server: BatchingServer,
                   started: list[subprocess.Popen]) -> None:
    # one request at a time per shard: the killed shard has one answer cached and one request in flight; no retry
    # (a retry would ask a prompt again)
    llm = f"{{backend: openai, base_url: '{server.base_url}', model: counting, concurrency: 1, max_retries: 0}}"
    base = ["--suite", "synthetic", "--strategies", "session_summary,slow_bm25", "--no-answers", "-q", *LLM_SMALL,
            "--set", "benchmark.strategy_settings.session_summary.summaries=llm",
            "--set", f"benchmark.strategy_settings.session_summary.summary_llm={llm}"]
    out, cache = tmp_path / "sharded", tmp_path / "llm-cache"

    def command(*args: str) -> list[str]:
        return [sys.executable, str(SLOW_CLI), *args]

    def shard(i: int) -> list[str]:
        return command("benchmark", *base, "--out", str(out), "--llm-cache-dir", str(cache),
                       "--shards", str(SHARDS), "--shard", str(i))

    def run(args: list[str], slow: float = 0.0) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=REPO, env=_env(root, MNEMOS_SLOW_SECONDS=str(slow)), capture_output=True,
                              text=True, timeout=300)

    def start(args: list[str], log: Path, slow: float = 0.0) -> subprocess.Popen:
        with log.open("w") as stderr:
            started.append(subprocess.Popen(args, cwd=REPO, env=_env(root, MNEMOS_SLOW_SECONDS=str(slow)),
                                            stdout=subprocess.DEVNULL, stderr=stderr))
        return started[-1]

    def kill(proc: subprocess.Popen) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    # the victim alone: its first answer reaches the shared cache, its second request waits on the server
    model.hold_after = 1
    log = tmp_path / "victim.log"
    victim = start(shard(VICTIM), log)
    answers = ResponseCache(cache / "responses")   # where build_llm keeps the responses under --llm-cache-dir
    _wait(lambda: model.holding.is_set() and len(answers) == 1, "its second request was in flight", victim, log)
    kill(victim)
    assert len(model.held) == 1
    model.hold_after = None
    model.release.set()

    episodes = out / "shards" / "synthetic" / f"{VICTIM}-of-{SHARDS}" / "episodes.jsonl"
    with ThreadPoolExecutor(3) as pool:    # the other 19 shards, 3 at a time, beside the victim's restarts
        others = {i: pool.submit(run, shard(i)) for i in range(SHARDS) if i != VICTIM}
        # restarted slowly (slow_bm25: 0.5 s a session), killed again after its first finished episode
        victim = start(shard(VICTIM), log, slow=0.5)
        _wait(lambda: len(_whole_lines(episodes)) >= 1, "it finished an episode", victim, log)
        kill(victim)
        assert len(_whole_lines(episodes)) == 1
        assert "1 of 4 answers from the response cache, asking 3" in log.read_text()   # the one it had, not again
        last = run(shard(VICTIM))
        for i, done in others.items():
            assert done.result().returncode == 0, f"shard {i}: " + done.result().stderr[-3000:]
    assert last.returncode == 0, last.stderr[-3000:]
    assert "resuming after 1 finished episode(s)" in last.stderr
    assert "asking" not in last.stderr         # every answer it needs is in the cache

    # the server: every prompt asked, each once, but the one in flight at the kill (never answered to the shard)
    asked = collections.Counter(model.asked)
    assert len(asked) == 2 * 40
    assert {p: n for p, n in asked.items() if n != 1} == {model.held[0]: 2}

    with ThreadPoolExecutor(2) as pool:    # the merge, beside the unsharded run (its own cache: it asks everything)
        merging = pool.submit(run, command("merge", *base, "--out", str(out), "--shards", str(SHARDS)))
        whole = run(command("benchmark", *base, "--out", str(tmp_path / "whole"), "--llm-cache-dir",
                            str(tmp_path / "whole-cache")))
        merged = merging.result()
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert merged.returncode == 0, merged.stderr[-3000:]
    assert model.asked - asked == collections.Counter(set(asked))   # the unsharded run asked the same prompts
    assert _report(out) == _report(tmp_path / "whole")   # nothing lost, nothing counted twice
