# alphac: the two commands on a fresh machine are `make demo` and `make test` (see README.md).
PY      ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed
ALPHAC   = $(BIN)/alphac
EXAMPLES = scalar_regression two_coordinate independent_state lsq_momentum lsq_adam

.PHONY: venv test repro demo docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest
	$(BIN)/python reproducible/check.py

# every artifact, built twice under varied conditions, byte for byte (docs/reproducible.md)
repro: $(STAMP)
	$(BIN)/python reproducible/check.py

demo: $(STAMP)
	@for e in $(EXAMPLES); do \
	  echo "== $$e (reference interpreter, 5 steps)"; \
	  $(ALPHAC) run examples/$$e.alpha --steps 5 || exit 1; \
	done

docs: $(STAMP)
	$(BIN)/python -m alphac.docs

clean:
	rm -rf build .pytest_cache .hypothesis
