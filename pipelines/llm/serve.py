"""A local OpenAI-compatible server for a model folder: ``transformers serve``, started and stopped from Python (and
:class:`BatchingServerProcess`, this project's ``serve-llm``, the same way).

The tests of the openai backend and ``benchmarks/llm_throughput.py`` serve a folder written by
``save_pretrained`` (a tiny random Llama, or the converted SmolLM2) this way; by hand the same is::

    transformers serve FOLDER --host 127.0.0.1 --port 8000      # then llm.base_url: http://127.0.0.1:8000/v1

The server is pinned to the folder (the model id of a request must be the folder's path, which
:attr:`TransformersServer.model` gives), runs offline (``HF_HUB_OFFLINE=1``) and answers ``/health`` once the
model is loaded (about 6 s for a tiny model, 10 s for SmolLM2 on 2 cores). ``continuous_batching`` turns on its
server-side batching of concurrent requests (paged attention), without which it answers one request at a time.
On the CPU give its paged KV cache a size (``extra_args=["--cb-num-blocks", "64", "--cb-max-batch-tokens",
"2048"]``): sized automatically, it takes most of the machine's memory (15 GB and 40 s of page-zeroing at the
first request, even for the tiny test model; checked with transformers 5.23.0).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Sequence

from pipelines.llm.base import LLMError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class TransformersServer:
    """``transformers serve FOLDER`` on ``host:port`` as a context manager (started on enter, stopped on exit)."""

    def __init__(self, folder: str | os.PathLike, *, host: str = "127.0.0.1", port: int | None = None,
                 continuous_batching: bool = False, log: str | os.PathLike | None = None,
                 extra_args: Sequence[str] = (), startup_timeout_s: float = 180.0):
        self.folder = Path(folder).resolve()
        self.host, self.port = host, port or free_port(host)
        self.continuous_batching = continuous_batching
        self.log_path = Path(log) if log else None
        self.extra_args = list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self._log: IO | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def model(self) -> str:
        """The model id the pinned server accepts: the folder's path."""
        return str(self.folder)

    @property
    def label(self) -> str:
        """What the error messages call this server."""
        return f"transformers serve {self.folder}"

    def command(self) -> list[str]:
        exe = Path(sys.executable).with_name("transformers")
        launcher = [str(exe)] if exe.exists() else [sys.executable, "-m", "transformers.cli.transformers"]
        return [*launcher, "serve", str(self.folder), "--host", self.host, "--port", str(self.port),
                "--continuous-batching" if self.continuous_batching else "--no-continuous-batching",
                *self.extra_args]

    def start(self, wait: bool = True) -> "TransformersServer":
        """Launch the server; with ``wait``, return once it answers ``/health`` (else call :meth:`wait` later:
        several servers then start side by side)."""
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # type: ignore[assignment]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        return self.wait() if wait else self

    def wait(self) -> "TransformersServer":
        """Block until the started server answers ``/health``; LLMError when it exits or times out first."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise LLMError(f"{self.label} exited (code {code}) before answering on "
                               f"{self.base_url}" + (f"; see {self.log_path}" if self.log_path else ""))
            if self.healthy():
                return self
            time.sleep(0.25)
        self.stop()
        raise LLMError(f"{self.label} did not answer /health on {self.host}:{self.port} within "
                       f"{self.startup_timeout_s:.0f} s")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self, kill: bool = False) -> None:
        """Stop the server (``kill``: SIGKILL at once, as a crash would; else SIGTERM, SIGKILL after 10 s)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()  # type: ignore[union-attr]
        self._log = None

    def __enter__(self) -> "TransformersServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BatchingServerProcess(TransformersServer):
    """``python -m pipelines serve-llm`` (:mod:`pipelines.llm.batch_server`: a local-backend model answering the
    requests in flight as one batch) in its own process, started and stopped as :class:`TransformersServer` is.
    ``model`` is any model of the local backend; the server answers to ``name``."""

    def __init__(self, model: str, *, name: str = "served", dtype: str = "auto", device: str = "auto",
                 batch_size: int = 8, llm_cache_dir: str | os.PathLike | None = None, host: str = "127.0.0.1",
                 port: int | None = None, log: str | os.PathLike | None = None, startup_timeout_s: float = 180.0):
        super().__init__(model, host=host, port=port, log=log, startup_timeout_s=startup_timeout_s)
        self.model_arg, self.name = str(model), name
        self.options = ["--dtype", dtype, "--device", device, "--batch-size", str(batch_size)]
        if llm_cache_dir is not None:
            self.options += ["--llm-cache-dir", str(llm_cache_dir)]

    @property
    def model(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return f"serve-llm {self.model_arg}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pipelines", "serve-llm", "--model", self.model_arg, "--name", self.name,
                "--host", self.host, "--port", str(self.port), *self.options]
