# Tierkeeper: `make demo` runs the main job, `make test` runs the whole suite; both set up what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: test stress-test demo setup harness lint crds clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

# Real components the tests start: Kafka jars (Maven, cached outside the repo) and helm/kubectl.
harness: setup
	PYTHONPATH=tests $(PY) -m harness.prepare

lint: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m tierkeeper_operator.crdgen --out crds/ --check

test: harness lint
	env -u AWS_DEFAULT_REGION -u AWS_PROFILE $(PY) -m pytest $(PYTEST_ARGS)

# The whole suite three times in a row with every core kept busy by tests/stress/burn.py (issue 19):
# no test may depend on the machine's speed. Results are recorded in docs/reliability.md.
stress-test: harness lint
	tests/stress/run_stressed.sh 3 $(PYTEST_ARGS)

crds: setup
	$(PY) -m tierkeeper_operator.crdgen --out crds/

demo: harness
	PYTHONPATH=tests $(PY) examples/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
