# `make demo` and `make test` work on a fresh clone: they create .venv and install `.[cpu,dev,examples,real]` (and
# PaddleOCR's training code, unstructured-paddleocr, and PaddleDetection, paddledet, without their conflicting pins)
# when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,dev,examples,real]'
	$(BIN)/python -m pip install --quiet --no-deps unstructured-paddleocr==2.10.0 albumentations==2.0.8 albucore==0.0.24 \
		paddledet==2.6.0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/paddlefit doctor --all
	$(BIN)/paddlefit plan resnet50 --batch-size 256
	$(BIN)/paddlefit cost --config examples/digits.yaml --cloud aws --cloud gcp --top 6
	$(BIN)/paddlefit train examples/digits.yaml --resume never --overwrite
	$(BIN)/paddlefit export runs/digits
	$(BIN)/paddlefit runs --last 3
	$(BIN)/paddlefit report runs/digits

# compileall first: the tests start hundreds of `paddlefit` processes, which otherwise recompile src/ each time
# under PYTHONDONTWRITEBYTECODE (set on these machines). Then the suite on two pytest-xdist workers (most tests wait
# on subprocess start-up, sleeping datasets and polling), then the tests marked `serial` (they measure this CPU's
# speed) alone, collected from the files that name the marker (conftest.py fails a serial test elsewhere); both
# parts always run. `--durations` prints the 25 slowest tests, where the suite's time goes.
test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/python -m compileall -q src tests/data
	$(BIN)/python -m pytest -q -n 2 -m "not serial" --durations=25 tests; parallel=$$?; \
	$(BIN)/python -m pytest -q -m serial $$(grep -rl --include='*.py' 'mark\.serial' tests); serial=$$?; \
	test $$parallel -eq 0 && test $$serial -eq 0

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# every bench script in bench/run_all.py's BENCHES, each its own process; results -> docs/benchmarks.md (atomically)
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# docs/job-spec.md from the Field descriptions in src/paddlefit/jobspec/spec.py (tests/test_docs.py fails when it is stale)
docs: $(STAMP)
	PYTHONPATH=src $(BIN)/python -c "from paddlefit.fileio import atomic_write_text; \
	from paddlefit.jobspec.docs import job_spec_markdown; atomic_write_text('docs/job-spec.md', job_spec_markdown())"

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
