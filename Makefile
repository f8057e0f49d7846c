# gnnrec-lab: two commands. `make lab` sets everything up and serves the dashboards;
# `make test` runs the whole suite. Both create .venv when it is missing.
PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
PIP        := $(VENV)/bin/pip
# CPU build of torch; a plain "torch" may pull a multi-GB CUDA build. Override: make TORCH_SPEC='torch==2.9.1' test
TORCH_SPEC ?= torch==2.13.0
PORT       ?= 5006
export GNNREC_LAB_DATA ?= $(CURDIR)/data

.PHONY: lab test test-fast lint bench install venv data browser clean dgl test-dgl recbole bench-eval

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[parquet,dash,test,peers,tracking]"
	@echo "compiling the numba kernels into their disk cache (once, ~1.5 min; the first run then starts at once)"
	$(VENV)/bin/gnnrec-lab warmup || echo "kernel warm-up failed; the first run compiles them instead"
	touch $@

install venv: $(VENV)/.installed

# The DGL lane: its own venv, because DGL 2.1.0 (the newest on the package index) loads only with
# torch 2.0-2.2.1 and numpy<2. torch 2.2.1 from the index brings its CUDA libraries (~4.9 GB; 3.5 min measured).
# DGL imports pandas, pyyaml, pydantic without declaring them. The project goes in with --no-deps
# and its own dependencies are installed with numpy and torch pinned, so nothing upgrades them.
DGL_VENV   ?= .venv-dgl
DGL_PY     := $(DGL_VENV)/bin/python
DGL_PINS   := "torch==2.2.1" "numpy==1.26.4"
$(DGL_VENV)/.installed: pyproject.toml
	test -x $(DGL_PY) || $(PYTHON) -m venv $(DGL_VENV)
	$(DGL_PY) -m pip install -q --upgrade pip
	$(DGL_PY) -m pip install -q $(DGL_PINS) "dgl==2.1.0" "torchdata==0.7.1" "setuptools<70" pandas pyyaml pydantic
	$(DGL_PY) -m pip install -q --no-deps -e .
	$(DGL_PY) -m pip install -q $(DGL_PINS) "numba>=0.60" scipy tqdm psutil "pytest>=8" pytest-timeout hypothesis
	DGLBACKEND=pytorch $(DGL_PY) -c "import dgl, torch, numpy; print('dgl', dgl.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
	touch $@

dgl: $(DGL_VENV)/.installed

# The DGL lane's tests: the kernel agreement and gradchecks (test_kernels runs every backend that
# imports, dgl among them there), the dgl backend's own tests, the DistDGL ones and the DGL peer of bench_epoch_peers.
DGL_TESTS  ?= tests/test_kernels.py tests/test_dgl.py tests/test_distributed.py tests/test_bench_epoch_peers.py
test-dgl: $(DGL_VENV)/.installed
	DGLBACKEND=pytorch $(DGL_PY) -m pytest -q -ra $(DGL_TESTS) $(PYTEST_ARGS)

# The RecBole lane (benchmarks/bench_eval.py's peer): its own venv, because RecBole 1.2.1 needs
# scipy<1.13 (its LightGCN calls dok_matrix._update, gone in 1.13) and numpy<2, which the lab's venv
# does not pin. torch is the same CPU 2.13.0. RecBole goes in with --no-deps: its ray<=2.6.3
# requirement (hyper-parameter search only) is not imported by training or evaluation.
RECBOLE_VENV ?= .venv-recbole
RECBOLE_PY   := $(RECBOLE_VENV)/bin/python
RECBOLE_PINS := "$(TORCH_SPEC)" "numpy==1.26.4" "scipy==1.12.0"
$(RECBOLE_VENV)/.installed: Makefile
	test -x $(RECBOLE_PY) || $(PYTHON) -m venv $(RECBOLE_VENV)
	$(RECBOLE_PY) -m pip install -q $(RECBOLE_PINS)
	$(RECBOLE_PY) -m pip install -q --no-deps "recbole==1.2.1"
	$(RECBOLE_PY) -m pip install -q $(RECBOLE_PINS) pandas tqdm "colorlog==4.7.2" "colorama==0.4.4" scikit-learn pyyaml \
	  tensorboard thop tabulate plotly texttable psutil
	$(RECBOLE_PY) -c "import recbole, torch, numpy, scipy; print('recbole', recbole.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__)"
	touch $@

recbole: $(RECBOLE_VENV)/.installed

# The lab's full-ranking evaluation against RecBole's full-sort evaluation, side by side
bench-eval: install $(RECBOLE_VENV)/.installed
	$(PY) benchmarks/bench_eval.py

data: install
	$(VENV)/bin/gnnrec-lab data prepare ml-100k

# Debian's chromium for the browser tests (playwright cannot download browsers here)
browser:
	@test -x /usr/bin/chromium || { echo "installing Debian chromium for browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || sudo sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null'; }

# Calibration is cached (gnnrec-lab calibrate --show succeeds once it ran); either way its verdict is
# shown (quiet or under load, what that means, how to fix a flagged one: every modeled number inherits it).
# The dashboard prints its own URL.
lab: data
	@$(VENV)/bin/gnnrec-lab calibrate --show --verdict 2>/dev/null || { \
	  echo "measuring this machine once for the roofline and the modeled tiers (gnnrec-lab calibrate --quick: memory bandwidth, latency, GEMM; about 40 s)"; \
	  $(VENV)/bin/gnnrec-lab calibrate --quick --verdict || echo "calibration failed; roofline and modeled bars wait for 'gnnrec-lab calibrate'"; }
	@$(VENV)/bin/gnnrec-lab dashboard --port $(PORT)

# ruff: pyflakes, pycodestyle, isort and bugbear, configured in pyproject.toml ([tool.ruff])
lint: install
	$(VENV)/bin/ruff check .

# The suite runs in TEST_JOBS processes (pytest-xdist), one test file per process at a time: a file's
# tests share their module fixtures and run in their written order. TEST_JOBS=0 runs it in one process.
TEST_JOBS  ?= 2
PYTEST     := $(VENV)/bin/python -m pytest -q -ra -n $(TEST_JOBS) --dist loadfile

test: install browser
	$(PYTEST) $(PYTEST_ARGS)

# The developer loop: everything but the tests marked slow, browser or notebook (pyproject.toml's markers)
test-fast: install
	$(PYTEST) -m "not slow and not browser and not notebook" $(PYTEST_ARGS)

bench: install $(RECBOLE_VENV)/.installed
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(DGL_VENV) $(RECBOLE_VENV) build *.egg-info
