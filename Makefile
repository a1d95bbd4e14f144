# `make demo` and `make test` work on a fresh clone: they create .venv and install `.[cpu,dev,examples,real]` (and
# PaddleOCR's training code, unstructured-paddleocr, without its conflicting pins) when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,dev,examples,real]'
	$(BIN)/python -m pip install --quiet --no-deps unstructured-paddleocr==2.10.0 albumentations==2.0.8 albucore==0.0.24
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/paddlefit doctor --all
	$(BIN)/paddlefit plan resnet50 --batch-size 256
	$(BIN)/paddlefit cost --config examples/digits.yaml --cloud aws --cloud gcp --top 6
	$(BIN)/paddlefit train examples/digits.yaml --resume never
	$(BIN)/paddlefit export runs/digits

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)
	$(BIN)/python bench/memory_accuracy.py
	$(BIN)/python bench/plan_speed.py
	$(BIN)/python bench/llm_plan.py
	$(BIN)/python bench/gpu_fit.py
	$(BIN)/python bench/trainer_overhead.py
	$(BIN)/python bench/cost_sanity.py
	$(BIN)/python bench/tune_gain.py
	$(BIN)/python bench/real_models.py
	$(BIN)/python bench/cpu_threads.py
	$(BIN)/python bench/gpu_accuracy.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
