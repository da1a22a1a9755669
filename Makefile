# mlstack: every target installs what it needs on a fresh machine (Python venv + npm packages).
#   make synth   synthesize every blueprint into cdk.out/ (offline, no AWS credentials)
#   make test    every gate: ruff, mypy --strict, pytest (synth once, cdk-nag, checkov, cfn-lint, snapshots, moto)
#   make lint    ruff + mypy + cfn-lint over cdk.out
#   make bench   synth time of all blueprints vs an empty CDK app
#   make check-charts  every pinned Helm chart version exists in its repository (needs the network)
#   make diagrams               docs/diagrams/<blueprint>.{dot,svg,png} + docs/blueprints.md (Graphviz from Debian)
#   make deploy-local BLUEPRINT=<name>   real `cdk deploy` against a local moto server (no AWS account)
#   make test-deploy-local      the local deploy test (create, update, no-change; 3-5 min, so not in `make test`)
#   make test-workloads   reference workloads on CPU (PyTorch DDP/FSDP/DeepSpeed, OpenVINO) in .venv-workloads
#   make test-slurm       HyperPod Slurm lifecycle scripts against real slurmctld/slurmd/slurmdbd/munge/MariaDB
#                         (Debian packages, root; about a minute, bounded at 5)
#   make bench-workloads  gradient compression to convergence, DDP/FSDP/ZeRO, OpenVINO fp32/int8 (BERT-base
#                         shapes): tables printed, plots in docs/bench/
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
# checkov runs from its own venv: its pins (boto3, packaging, networkx) clash with boto3/moto/CDK in .venv.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
# Node 22 from the npm registry (package.json) comes first: the machine's Node 20 is end-of-life for jsii.
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# Bytecode is cached, in .pycache/ (git-ignored) rather than next to the sources. An environment that sets
# PYTHONDONTWRITEBYTECODE (some CI images do) would otherwise have every Python process of a test run (the pytest
# workers, the session synth, each `cdk synth`, own-app and wheel subprocess) compile aws-cdk-lib's, moto's and the
# tests' modules from source again: collecting the tests took 29 s instead of 10 s per process that way.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.pycache

WL_VENV := .venv-workloads
WL_BIN := $(WL_VENV)/bin

.PHONY: install synth test test-mypy test-pytest lint bench snapshot-update clean check-charts diagrams graphviz deploy-local test-deploy-local \
	install-workloads test-workloads bench-workloads slurm-packages test-slurm

INSTALL_STAMPS := $(STAMPS)/venv $(STAMPS)/npm $(STAMPS)/checkov-$(CHECKOV_VERSION)
# The three installs share nothing (two venvs, node_modules): on a fresh clone they run side by side.
install:
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(INSTALL_STAMPS)

# The two venvs are filled by uv (from PyPI, pinned here; the workloads venv keeps pip, which takes the machine's
# local torch wheel). pip spent 25 s of CPU on each: for .venv mostly unpacking, for checkov mostly its resolver
# backtracking over checkov's exact pins; uv resolves the same versions (pip freeze compared) in about 9 s and 2 s.
# uv compiles no bytecode unless told (aws-cdk-lib is 530 MB of Python, most of it never imported here): Python
# compiles each module the first time it is imported instead, and keeps the .pyc.
UV_VERSION := 0.13.8
UV_DIR := .tools/uv-$(UV_VERSION)
UV := $(UV_DIR)/bin/uv
UV_INSTALL := $(UV) pip install --quiet
# uv reads neither pip.conf nor PIP_DEFAULT_TIMEOUT; its own read timeout is 30 s.
export UV_HTTP_TIMEOUT ?= 180

# uv's wheel has no dependencies and one small Python launcher: without pip's resolver and bytecode pass this first,
# serial step of a fresh clone takes about 0.5 s less (2.1-2.8 -> 1.8-2.1 s, three interleaved pairs).
$(UV):
	rm -rf $(UV_DIR)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps --no-compile --target $(UV_DIR) \
		'uv==$(UV_VERSION)'

# Without ensurepip (4 s of CPU): the pip the wheel test builds with is pinned in the dev extra.
$(STAMPS)/venv: pyproject.toml | $(UV)
	$(PYTHON) -m venv --without-pip $(VENV)
	$(UV_INSTALL) --python $(BIN)/python -e '.[dev]'
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/checkov-$(CHECKOV_VERSION): | $(UV)
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv --without-pip $(CHECKOV_VENV)
	$(UV_INSTALL) --python $(CHECKOV_VENV)/bin/python 'checkov==$(CHECKOV_VERSION)'
	@mkdir -p $(STAMPS) && rm -f $(STAMPS)/checkov-* && touch $@

# --omit=peer: @cdklabs/cdk-validator-cfnguard names aws-cdk-lib as a peer; only its cfn-guard binary and rules are
# used (tests/template_checks), so the 160 MB npm aws-cdk-lib stays out.
$(STAMPS)/npm: package.json package-lock.json
	npm ci --omit=peer --no-audit --no-fund --loglevel=error
	@node --version | grep -q '^v22\.' || { echo "node_modules/.bin/node is not Node 22"; exit 1; }
	@mkdir -p $(STAMPS) && touch $@

synth: install
	rm -rf cdk.out
	$(BIN)/python -m mlstack.synth_all cdk.out

# mypy and pytest run side by side (a fresh clone's mypy, no cache yet, is the next longest step). pytest runs in
# pytest-xdist workers, one per CPU up to 4: the blueprints are synthesized once per run, in a process of their own
# that the first worker starts, while the workers run the tests that need no synth (tests/conftest.py); each test
# module is one work unit (--dist loadscope, units as tests/scheduling.py draws them), in the order conftest gives
# (--no-loadscope-reorder).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > 4 ? 4 : n )))
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@$(MAKE) --no-print-directory -j2 --output-sync=line test-mypy test-pytest

test-mypy:
	$(BIN)/mypy

test-pytest:
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

lint: synth
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/cfn-lint cdk.out/assembly-*/*.template.json
	$(CHECKOV_VENV)/bin/checkov --framework cloudformation --skip-download --quiet --compact \
		$$(printf -- '-f %s ' cdk.out/assembly-*/*.template.json)

# Needs the network: every pinned Helm chart version exists where the kubectl handler pulls it from.
check-charts: install
	$(BIN)/python -m mlstack.constructs.training.chart_check

bench: install
	$(BIN)/python bench/synth_bench.py

snapshot-update: install
	$(BIN)/pytest -q tests/blueprints/test_gates.py --snapshot-update

graphviz:
	@dpkg -s graphviz >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz; }

diagrams: install graphviz
	CDK_VALIDATION=false $(BIN)/python -m mlstack.diagram docs

# Graphviz comes from Debian's packages; apt-get needs root (sudo when not already root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BLUEPRINT ?= eks-gpu-training
deploy-local: install
	$(BIN)/python -m mlstack.local_deploy $(BLUEPRINT)

test-deploy-local: install
	MLSTACK_LOCAL_DEPLOY=1 $(BIN)/pytest -q tests/local_deploy/test_local_deploy_cli.py


# The workloads' heavy dependencies (PyTorch CPU build, DeepSpeed, OpenVINO, NNCF) live in their own venv so
# that `make test` stays fast and light. DS_BUILD_OPS=0: DeepSpeed compiles no C++/CUDA op at install time.
install-workloads: $(STAMPS)/venv-workloads

$(STAMPS)/venv-workloads: requirements-workloads.txt
	$(PYTHON) -m venv $(WL_VENV)
	DS_BUILD_OPS=0 $(WL_BIN)/pip install --quiet --disable-pip-version-check -r requirements-workloads.txt
	@mkdir -p $(STAMPS) && touch $@

test-workloads: install-workloads
	DS_BUILD_OPS=0 DS_ACCELERATOR=cpu $(WL_BIN)/pytest -q -p no:cacheprovider workload_tests

# About 10 minutes of CPU (it prints its wall and CPU time), niced: the machine is shared. Writes docs/bench/*.png.
bench-workloads: install-workloads
	DS_BUILD_OPS=0 DS_ACCELERATOR=cpu nice -n 10 $(WL_BIN)/python -m runtime.workloads.bench


# Real Slurm for the HyperPod lifecycle scripts: Debian's slurm-wlm (slurmctld, slurmd), slurmdbd, munge and
# MariaDB. The test stops every daemon it started by its PID, also on failure; `timeout` bounds the whole run.
# Real daemons the lifecycle-script tests run: Slurm for HyperPod Slurm, containerd for HyperPod EKS's on_create.
SLURM_PACKAGES := slurm-wlm slurmdbd munge mariadb-server containerd
slurm-packages:
	@dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(SLURM_PACKAGES); }

test-slurm: install slurm-packages
	@pids="$$(mktemp -d)"; \
	trap 'for f in "$$pids"/*.pid; do [ -f "$$f" ] && kill "$$(cat "$$f")" 2>/dev/null || true; done; rm -rf "$$pids"' EXIT; \
	MLSTACK_SLURM=1 MLSTACK_SLURM_PIDS="$$pids" \
	$(if $(wildcard $(WL_BIN)/python),MLSTACK_WORKLOADS_PYTHON=$(CURDIR)/$(WL_BIN)/python) \
		timeout --kill-after=30 300 $(BIN)/pytest -q -p no:cacheprovider tests/runtime/test_hyperpod_slurm_daemons.py \
			'tests/runtime/test_hyperpod_lifecycle.py::test_containerd_reads_the_edited_root'


clean:
	rm -rf cdk.out $(STAMPS) $(VENV) $(CHECKOV_VENV) $(WL_VENV) node_modules .pycache .tools
