# The README's two commands: `make demo` and `make test`. Both build .venv from the project's own files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GPUPIPE := $(VENV)/bin/gpupipe
DEMO_WARC := data/synthetic/crawl.warc.gz

.PHONY: demo demo-full test bench install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU build of torch first (on disk here); a bare `torch` would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# numba compiles each kernel on first use (10-30 s a stage): once here, not inside a user's first run
	$(GPUPIPE) warmup
	touch $@

install: $(VENV)/.installed

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

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed
	$(PY) profiling/bench_text_hash.py
	$(PY) profiling/bench_minhash_kernel.py --docs 5000
	$(PY) profiling/near_dedup_quality.py --docs 2000

clean:
	rm -rf runs data/synthetic
