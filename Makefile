# alphac: the two commands on a fresh machine are `make demo` and `make test` (see README.md).
PY      ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed
ALPHAC   = $(BIN)/alphac
EXAMPLES = scalar_regression two_coordinate independent_state lsq_momentum lsq_adam

.PHONY: venv data test repro roles demo docs bench fuzz cli-fuzz math-soak size clean

# ptxas assembles the GPU code at build time (never at run time). Without one on the PATH (or in
# $ALPHAC_PTXAS), the venv gets CUDA's pinned ptxas from PyPI.
PTXAS_WHEEL = nvidia-cuda-nvcc==13.0.88
WITH_PTXAS  = p=$$(command -v ptxas || ls $(CURDIR)/$(VENV)/lib/python3*/site-packages/nvidia/cu13/bin/ptxas 2>/dev/null | head -n 1); \
              export ALPHAC_PTXAS=$${ALPHAC_PTXAS:-$$p};

# what the demo and the data need: numpy (alphac's one dependency) and scikit-learn (the
# `examples` extra), both read from pyproject.toml; CUDA's ptxas when none is here (build-all
# assembles the examples' GPU code); and `$(BIN)/alphac`, which runs this tree's alphac (no
# package is built or installed: nothing is written into the tree, nothing goes stale)
BASE     = $(VENV)/.base
DEPS     = $(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
                     print(*p["dependencies"], *p["optional-dependencies"]["examples"])'
$(BASE): pyproject.toml
	@echo "== $(VENV): $$($(DEPS)) (pyproject.toml), once"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q $$($(DEPS))
	@$(WITH_PTXAS) [ -n "$$ALPHAC_PTXAS" ] || { echo "== CUDA's ptxas ($(PTXAS_WHEEL)), once"; \
	  $(BIN)/python -m pip install -q $(PTXAS_WHEEL); }
	@printf '#!/bin/sh\nexport PYTHONPATH="%s$${PYTHONPATH:+:$$PYTHONPATH}"\nexec "%s" -m alphac "$$@"\n' \
	  "$(CURDIR)" "$(CURDIR)/$(BIN)/python" > $(ALPHAC) && chmod +x $(ALPHAC)
	@touch $@

# the test tools besides (pytest, hypothesis, ...: the `test` extra), alphac installed editable
$(STAMP): pyproject.toml $(BASE)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

# the real data sets the examples load (examples/digits_mlp.alpha), from scikit-learn's bundled
# copies: written here, never committed; the same bytes on every run (examples/data/make_data.py)
DATA_NPY = $(shell $(PY) examples/data/make_data.py --list)
$(DATA_NPY) &: examples/data/make_data.py | $(BASE)
	$(BIN)/python examples/data/make_data.py

data: $(DATA_NPY)

# the suite; it runs reproducible/check.py once (tests/test_repro.py::test_check_passes_on_this_tree).
# Two pytest processes at once, the test files dealt between them by weight (tests/conftest.py,
# --shard); the second's output is printed after the first's, and either failing fails the target
test: $(STAMP) data
	@$(WITH_PTXAS) log=$$(mktemp); \
	$(BIN)/python -m pytest -p no:cacheprovider --shard 1/2 >$$log 2>&1 & two=$$!; \
	trap 'kill $$two 2>/dev/null; rm -f $$log' EXIT; \
	$(BIN)/python -m pytest -p no:cacheprovider --shard 0/2; one=$$?; \
	wait $$two; other=$$?; echo "==== the second half of the suite (--shard 1/2) ===="; cat $$log; \
	echo "make test: shard 0/2 exit $$one, shard 1/2 exit $$other"; test $$one = 0 && test $$other = 0

# every artifact, built twice under varied conditions, byte for byte (docs/reproducible.md)
repro: $(STAMP) data
	$(WITH_PTXAS) $(BIN)/python reproducible/check.py

# every artifact: the learners for every target, and one executable per role of every deployment
# in examples/ (build/roles/DEPLOYMENT/ROLE), with build/MANIFEST.json
# (build-all keeps what is up to date: the same compiler, tools, recipe and inputs' contents)
roles: $(BASE) data
	@$(WITH_PTXAS) $(ALPHAC) build-all --out build --progress always

# the main job: build the roles, launch the reference star (owners 0 and 2 on AArch64 when
# qemu-aarch64 is here), print the published state and compare it with the reference interpreter;
# then train the digits MLP on four owners, show its loss going down and its test accuracy
DEMO = build/demo
demo: roles
	@if command -v qemu-aarch64 >/dev/null; then dep=lsq_adam_mixed; else dep=lsq_adam_star; fi; \
	echo "== launching build/roles/$$dep (5 steps)"; \
	$(ALPHAC) launch build/roles/$$dep --steps 5 --compare --format decimal
	@echo "== training the digits MLP: build/roles/digits_star, 4 owners, 300 full-batch Adam steps"
	@rm -rf $(DEMO) && $(ALPHAC) launch build/roles/digits_star --steps 300 --checkpoint $(DEMO)/ck \
	  --records $(DEMO)/runs --progress always > /dev/null
	@echo "== its loss, step by step (alphac plot): each step's mean over the 1500 training images, of"
	@echo "   the parameters the step starts from (so \`last\` is step 300's, before its update)"
	@$(ALPHAC) plot $(DEMO)/runs/digits_star-0001/record.json
	@echo "== the trained model on the 297 held-out images (alphac eval)"
	@$(ALPHAC) eval examples/digits_mlp.alpha --checkpoint $(DEMO)/ck \
	  --data x=examples/data/digits_x_test.npy --data y=examples/data/digits_y_test.npy

# random learners through every engine (tests/fuzz.py): `make fuzz MINUTES=30 [SEED=N] [FAST=1]`
MINUTES ?= 10
fuzz: $(STAMP)
	$(WITH_PTXAS) $(BIN)/python tests/fuzz.py --minutes $(MINUTES) $(if $(SEED),--seed $(SEED)) $(if $(FAST),--fast)

# random command lines of every `alphac` command over hostile files: `make cli-fuzz [COUNT=N] [SEED=N]`
CLI_COUNT ?= 5000
cli-fuzz: $(STAMP)
	ALPHAC_CLI_FUZZ=$(CLI_COUNT) $(if $(SEED),ALPHAC_CLI_FUZZ_SEED=$(SEED)) $(BIN)/python -m pytest -q -s tests/test_hostile.py -k fuzzer

# the contract's functions against MPFR: a billion random inputs each (`COUNT=1e7` for less)
COUNT ?= 1e9
math-soak: $(STAMP)
	$(BIN)/python tests/math_soak.py --count $(COUNT)

# lines per package, hand-written and generated apart, against each package's budget
# (tests/test_size.py checks the budgets; docs/structure.md says why they are what they are)
size: $(STAMP)
	$(BIN)/python tests/test_size.py

bench: $(STAMP) data
	$(WITH_PTXAS) $(BIN)/python bench/learners.py
	$(BIN)/python bench/functions.py
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/distributed.py
	$(BIN)/python bench/interp.py
	$(BIN)/python bench/digits.py
	$(BIN)/python bench/mlp.py $(if $(TORCH_PYTHON),--torch-python $(TORCH_PYTHON))
	$(BIN)/python bench/data.py
	$(BIN)/python bench/exact_sum.py

docs: $(STAMP)
	$(BIN)/python -m alphac.tools.docs

clean:
	rm -rf build .pytest_cache .hypothesis
