# The course's two commands: `make lab` opens it, `make test` checks everything.
VENV ?= .venv
PY := $(VENV)/bin/python
# Two installs: the course (what the notebooks need, `make lab`) and everything (the website and
# the tests besides, `make test`). The pins are split by purpose; README.md gives each file's size.
COURSE_REQS := requirements.txt requirements-gpt2.txt
ALL_REQS := $(COURSE_REQS) requirements-site.txt requirements-test.txt
COURSE := $(VENV)/.installed-course
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
ZH_NOTEBOOKS := $(sort $(wildcard notebooks/zh/[0-9]*.ipynb))
# nbval hands whole notebooks to its two workers in this order: the slowest first, so that both
# finish at about the same time instead of one waiting on a long notebook handed out last.
SLOWEST := 14 10 11 07 06 15 13 04 12
NBVAL_ORDER := $(foreach n,$(SLOWEST),$(wildcard notebooks/$(n)_*.ipynb)) \
	$(filter-out $(foreach n,$(SLOWEST),notebooks/$(n)_%),$(NOTEBOOKS))
ZH_NBVAL_ORDER := $(foreach n,$(SLOWEST),$(wildcard notebooks/zh/$(n)_*.ipynb)) \
	$(filter-out $(foreach n,$(SLOWEST),notebooks/zh/$(n)_%),$(ZH_NOTEBOOKS))
# One thread per process: outputs are stored and compared that way, and two 2-thread torch
# processes on a 2-core machine run several times slower than two 1-thread ones.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0

# `make notebook-times ARGS="--only native --threads 1 notebooks/03_scaled_attention.ipynb"` times only those.
.PHONY: course install lab test check lint unit nbval nbval-native browser notebooks zh site assets figures screenshots benchmark notebook-times clean

$(COURSE): $(COURSE_REQS) pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(addprefix -r ,$(COURSE_REQS))
	touch $(COURSE)

$(STAMP): $(ALL_REQS) pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(addprefix -r ,$(ALL_REQS))
	touch $(COURSE) $(STAMP)

course: $(COURSE)
install: $(STAMP)

# JupyterLab refuses to run as root unless told; containers often are root.
lab: course
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The tang300 corpus comes from Debian's fortunes-zh package; installed like Chromium below.
# One file per worker: a module's fixtures (notebook 14 executed solved) are built once, not on
# both workers.
unit: install
	bash tests/install_fortunes_zh.sh
	bash tests/install_fonts_cjk.sh
	$(ONE_THREAD) MPLBACKEND=Agg $(PY) -m pytest -q -n 2 --dist loadfile tests --ignore=tests/browser

# Stored outputs are made and compared under an arithmetic that does not depend on the CPU
# (scalar ATen kernels, MKL's compatible path: identical on every x86-64 machine): `nbval` compares
# the English edition so. `nbval-native` compares the Chinese edition under this CPU's own AVX2 /
# AVX-512 kernels, so a number printed more finely than a long run's rounding allows fails here
# and not on a reader's laptop. The two editions run the same code and print the same numbers
# (tests/test_translations.py), so each check holds for both: each edition is executed once.
# On a CPU without the portable settings (arm64) both run every notebook with its in-cell checks
# and say so.
PORTABLE := $(shell bash tests/notebook_arithmetic.sh env)

nbval: install
	bash tests/install_fonts_cjk.sh  # 08 draws Chinese characters: without the font it warns
	$(PY) tests/check_notebooks_executed.py $(NOTEBOOKS) $(ZH_NOTEBOOKS)
	PY=$(PY) bash tests/notebook_arithmetic.sh portable $(NBVAL_ORDER)

nbval-native: install
	bash tests/install_fonts_cjk.sh  # the Chinese edition's figures draw Chinese
	PY=$(PY) bash tests/notebook_arithmetic.sh native $(ZH_NBVAL_ORDER)

# JupyterLab in headless Chromium: run notebook 08 and the slider's cells of 04 and move their
# sliders, type a wrong and then a correct exercise body into notebook 03, check the page; and the
# website in both editions. Two workers, one test file each at a time (the website's two files together,
# sharing one build: tests/browser/conftest.py).
# Screenshots (and, on failure, the console and server logs) go to test-artifacts/browser/.
browser: install
	bash tests/browser/install_chromium.sh
	$(ONE_THREAD) $(PY) -m pytest -q -n 2 --dist loadgroup tests/browser --durations=0

test: lint unit nbval nbval-native browser

# The fast tier, while working on the library: lint and the unit tests, no notebooks, no browser.
check: lint unit

# Re-execute every notebook in place, in the pinned environment, one thread, the portable
# arithmetic, no timing metadata: the English edition, then the Chinese one (built from it, then
# executed on its own, then built again to keep its outputs in the built form).
notebooks: course
	yours=$$(mktemp -d); for nb in $(NOTEBOOKS); do \
		$(ONE_THREAD) $(PORTABLE) GPTLIB_YOURS=$$yours $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
			--NotebookClient.record_timing=False --ExecutePreprocessor.timeout=900 "$$nb" || exit 1; \
	done
	$(PY) -m i18n.build build
	yours=$$(mktemp -d); for nb in $(ZH_NOTEBOOKS); do \
		$(ONE_THREAD) $(PORTABLE) GPTLIB_YOURS=$$yours $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
			--NotebookClient.record_timing=False --ExecutePreprocessor.timeout=900 "$$nb" || exit 1; \
	done
	$(PY) -m i18n.build build

# The Chinese edition: notebooks/zh/ rebuilt from the English notebooks and i18n/zh/*.md (the
# prose is translated; the code is the English code plus the language choice; the outputs of
# cells whose code did not change are kept). `python -m i18n.build check` names every
# translation whose English text has changed since, and every cell to execute again.
zh: course
	$(PY) -m i18n.build build

# Both editions as a static website in _site/ (no network needed to build or read it).
site: install
	$(PY) -m website.build

assets: course
	PATH=$(VENV)/bin:$$PATH bash assets/regenerate.sh

# The README's pictures, drawn by gptlib (assets/figures.py)
figures: course
	$(PY) assets/figures.py

# The README's screenshot of a slider in JupyterLab, taken by the browser test of notebook 08.
SLIDER_SHOT := test-artifacts/browser/test_logits_chapter_runs_and_temperature_slider_drives_samples/slider.png
# And three of the Chinese edition: a check naming a slip, a hint, the Tang model's attention map.
ZH_SHOTS := test-artifacts/browser/test_chinese_check_hint_and_tang_map
# And the live model on the website: page 04 on a desktop, the Chinese page 08 on a phone.
LIVE_SHOTS := test-artifacts/browser/live-model
screenshots: install
	bash tests/browser/install_chromium.sh
	$(ONE_THREAD) $(PY) -m pytest -q tests/browser/test_logits_chapter.py tests/browser/screenshots_zh.py
	cp $(SLIDER_SHOT) assets/figures/slider.png
	cp $(ZH_SHOTS)/zh-check.png $(ZH_SHOTS)/zh-hint.png $(ZH_SHOTS)/zh-tang.png assets/figures/
	$(ONE_THREAD) $(PY) -m pytest -q tests/browser/test_live_model.py
	cp $(LIVE_SHOTS)/desktop-en-04.png assets/figures/live-model.png
	cp $(LIVE_SHOTS)/phone-zh-08.png assets/figures/zh-live-model-phone.png

benchmark: course
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/train_vs_hf.py
	$(PY) benchmarks/generate_speed.py
	$(PY) benchmarks/bpe_speed.py
	$(PY) benchmarks/gpt2_vs_hf.py
	$(PY) benchmarks/norm_speed.py
	$(PY) benchmarks/attention_speed.py

# Each English notebook's Run All seconds (executed on a copy, as `make notebooks` does, two
# threads unless ARGS says otherwise) and the total; nothing is asserted.
notebook-times: course
	$(PY) benchmarks/notebook_times.py $(ARGS)

clean:
	rm -rf $(VENV) runs _site
