# The course's two commands: `make lab` opens it, `make test` checks everything.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
# One thread per process: outputs are stored and compared that way, and two 2-thread torch
# processes on a 2-core machine run several times slower than two 1-thread ones.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0

.PHONY: install lab test lint unit nbval nbval-other-cpu browser notebooks assets benchmark clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

# JupyterLab refuses to run as root unless told; containers often are root.
lab: install
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The tang300 corpus comes from Debian's fortunes-zh package; installed like Chromium below.
unit: install
	bash tests/install_fortunes_zh.sh
	$(ONE_THREAD) MPLBACKEND=Agg $(PY) -m pytest -q -n 2 tests --ignore=tests/browser

NBVAL := $(PY) -m pytest -q -n 2 --dist loadscope --nbval --nbval-sanitize-with notebooks/sanitize.cfg

nbval: install
	$(PY) tests/check_notebooks_executed.py $(NOTEBOOKS)
	$(ONE_THREAD) $(NBVAL) $(NOTEBOOKS)

# The same comparison with another CPU's arithmetic: scalar ATen kernels and MKL's compatible
# code path add in a different order than AVX2 / AVX-512 ones. A stored output that depends on
# the CPU (a long training run printed to 4 decimals, say) fails here, not on the next machine.
nbval-other-cpu: install
	$(ONE_THREAD) ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE $(NBVAL) $(NOTEBOOKS)

# JupyterLab in headless Chromium: run notebooks 04 and 07 and move their sliders, type a wrong
# and then a correct exercise body into notebook 03, check the page.
# Screenshots (and, on failure, the console and server logs) go to test-artifacts/browser/.
browser: install
	bash tests/browser/install_chromium.sh
	$(ONE_THREAD) $(PY) -m pytest -q tests/browser --durations=0

test: lint unit nbval nbval-other-cpu browser

# Re-execute every notebook in place, in the pinned environment, one thread, no timing metadata.
notebooks: install
	for nb in $(NOTEBOOKS); do \
		$(ONE_THREAD) $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
			--NotebookClient.record_timing=False --ExecutePreprocessor.timeout=900 "$$nb" || exit 1; \
	done

assets: install
	PATH=$(VENV)/bin:$$PATH bash assets/regenerate.sh

benchmark: install
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/generate_speed.py
	$(PY) benchmarks/bpe_speed.py
	$(PY) benchmarks/gpt2_vs_hf.py

clean:
	rm -rf $(VENV) runs
