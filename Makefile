# The two commands a newcomer types: `make test` and `make repro`. Each creates .venv when it is missing and
# installs the project into it first (again whenever pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fairdp-installed
PATH_STAMP := $(VENV)/.fairdp-path
# torch first, pinned, so that pip takes the CPU build rather than a multi-GB CUDA one; override as you need,
# e.g. `make test TORCH_SPEC=torch` on a GPU machine.
TORCH_SPEC ?= torch==2.13.0
# `make repro` runs params.yaml as it is (the default profile as committed); PROFILE=default rewrites params.yaml from
# profiles/ first; any other PROFILE runs in profile-runs/<PROFILE>/ (below).
PROFILE ?=
export FAIRDP_DATA_MIRROR ?= $(abspath ../shared/datasets)
# glibc's allocator maps and zeroes large per-step temporaries afresh every step (PERF_NOTES.md): up to 3.6x.
export MALLOC_MMAP_THRESHOLD_ ?= 4294967296
export MALLOC_TRIM_THRESHOLD_ ?= 68719476736
# MKL's result bits depend on memory alignment unless conditional numerical reproducibility is on (see
# fairdp_core/stages/__init__.py): a bank is the same bytes in every process.
export MKL_CBWR ?= COMPATIBLE
# torch's kernels (and numpy's OpenBLAS's) round differently per vector width: AVX2's everywhere the CPU has them, so
# AVX2 and AVX-512 machines give the same bits (fairdp_core/stages/__init__.py sets the same for a stage started
# without make).
ifneq ($(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo y),)
export ATEN_CPU_CAPABILITY ?= avx2
export OPENBLAS_CORETYPE ?= Haswell
endif

.PHONY: install test test-slow repro lint clean-venv synth-venv
# The smartnoise-synth baselines in their own venv: smartnoise-synth 1.0.8 pins opacus < 0.15 (0.14.0),
# which conflicts with the project's opacus 1.6. Same torch build; `packaging` is an undeclared import of its GANs.
SYNTH_VENV := .venv-synth
SYNTH_STAMP := $(SYNTH_VENV)/.fairdp-installed

install: $(PATH_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The venv's bin first on PATH in every process its python starts, as an activated venv has it: `.venv/bin/dvc
# repro` from a shell whose PATH lacks the venv then runs the stage commands' `python` from the venv, and
# `.venv/bin/fairdp exp run` finds the venv's dvc (fairdp_core/venv_path.pth, copied into its site-packages).
$(PATH_STAMP): $(STAMP) fairdp_core/venv_path.pth
	cp fairdp_core/venv_path.pth "$$($(BIN)/python -c 'import site; print(site.getsitepackages()[0])')/fairdp-venv-path.pth"
	touch $(PATH_STAMP)

# `make test`: the fast suite (a few minutes); `make test-slow`: the long statistical and end-to-end tests (marked
# `slow`). CI runs both.
test: $(PATH_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: $(PATH_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

synth-venv: $(SYNTH_STAMP)

$(SYNTH_STAMP):
	test -x $(SYNTH_VENV)/bin/python || $(PYTHON) -m venv $(SYNTH_VENV)
	$(SYNTH_VENV)/bin/python -m pip install -q --upgrade pip
	$(SYNTH_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(SYNTH_VENV)/bin/python -m pip install -q "smartnoise-synth==1.0.8" packaging pyyaml
	touch $(SYNTH_STAMP)

# A profile other than default runs in profile-runs/<PROFILE>/, a copy of the tracked files with its own params.yaml,
# results, reports and dvc.lock (fairdp_core/study/profile_dir.py): the committed study is never overwritten. IN_PLACE=1
# runs it in this checkout instead (CI does, in a throwaway copy).
OWN_DIR := $(if $(IN_PLACE),,$(filter-out default,$(PROFILE)))
repro: $(PATH_STAMP) $(SYNTH_STAMP)
ifneq ($(OWN_DIR),)
	$(BIN)/python -m fairdp_core.study.profile_dir $(PROFILE)
	$(MAKE) -C profile-runs/$(PROFILE) repro IN_PLACE=1
	@echo "profile $(PROFILE): reports in profile-runs/$(PROFILE)/reports/ (the committed study is unchanged)"
else
	$(if $(PROFILE),$(BIN)/fairdp use-profile $(PROFILE),$(BIN)/fairdp grid --write)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro $(DVC_ARGS)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/fairdp prune-lock
endif

lint: $(STAMP)
	$(BIN)/ruff check fairdp_core tests

clean-venv:
	rm -rf $(VENV)

.PHONY: breakages
breakages: $(STAMP)
	$(BIN)/python tests/privacy_breakages.py

.PHONY: bench bench-quick bench-sharding bench-gpu bench-ratios
# The cost of privacy first (DP-SGD ÷ non-private at one bank size per workload, 7 interleaved rounds, against
# benchmarks/ratios_baseline.json: benchmarks/ratios.md), then the table against Opacus, then sharding, then each
# rule's cost against DP-SGD's in the engine (benchmarks/rule_cost.md) and on the Opacus route (opacus_rule_cost.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py --ratios
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/run.py --sharding
	$(BIN)/python benchmarks/run.py --rule-cost
	$(BIN)/python benchmarks/run.py --opacus-rule-cost

bench-ratios: $(STAMP)
	$(BIN)/python benchmarks/run.py --ratios

# 1 process vs 2 worker processes (loky) vs 2 Ray tasks, interleaved: benchmarks/sharding.md
bench-sharding: $(STAMP)
	$(BIN)/python benchmarks/run.py --sharding

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py --quick

# one bank of every (dataset, model) pair of the gpu profile, timed, and the profile's training extrapolated
# (benchmarks/gpu_timing.md; on a machine without CUDA: make bench-gpu DEVICE=cpu -> benchmarks/cpu_timing.md)
DEVICE ?= cuda
bench-gpu: $(STAMP)
	$(BIN)/python benchmarks/gpu_timing.py --device $(DEVICE) $(if $(filter cpu,$(DEVICE)),--steps 3 --workers 1,)
