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

.PHONY: lab test bench install venv data browser clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[parquet,dash,test,peers]"
	@echo "compiling the numba kernels into their disk cache (once, ~1.5 min; the first run then starts at once)"
	$(VENV)/bin/gnnrec-lab warmup || echo "kernel warm-up failed; the first run compiles them instead"
	touch $@

install venv: $(VENV)/.installed

data: install
	$(VENV)/bin/gnnrec-lab data prepare ml-100k

# Debian's chromium for the browser tests (playwright cannot download browsers here)
browser:
	@test -x /usr/bin/chromium || { echo "installing Debian chromium for browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || sudo sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null'; }

lab: data
	$(VENV)/bin/gnnrec-lab calibrate --show >/dev/null 2>&1 || $(VENV)/bin/gnnrec-lab calibrate --quick >/dev/null || echo "calibration failed; roofline and modeled bars wait for 'gnnrec-lab calibrate'"
	@echo "gnnrec-lab dashboards: http://localhost:$(PORT)/"
	$(VENV)/bin/gnnrec-lab dashboard --port $(PORT)

test: install browser
	$(VENV)/bin/python -m pytest -q -ra $(PYTEST_ARGS)

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
