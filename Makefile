# Thin aliases; each recipe is also a command you can type yourself.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
CERTS  ?= .certs

.PHONY: install lock pin-image compile clean-compiled run test lint typecheck unit e2e control-plane kustomize helm promtool check-examples generate bench fuzz clean jobset-controller

# The dependencies come from the hashed lock, the package itself (editable) without them.
$(BIN)/preemptguard: pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

install: $(BIN)/preemptguard

# Resolves pyproject.toml's dependencies anew into the hashed locks, for every Python it allows
# (3.11 on): requirements-dev.lock (the runtime and the dev extra: make install, the tests),
# requirements.lock (the image's runtime) and requirements-build.lock (what the image compiles
# the engine with), the last two at the versions of the first. Pins still allowed are kept;
# `make lock LOCK_ARGS=--upgrade` (or `--upgrade-package NAME`) moves them. Uses uv, installed
# once into ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}. tests/test_lock.py fails on a stale lock.
UV_VERSION ?= 0.13.8
lock:
	@uv=$${PREEMPTGUARD_CACHE:-$$HOME/.cache/preemptguard}/uv-$(UV_VERSION); \
	test -x "$$uv/bin/uv" || { $(PYTHON) -m venv "$$uv" && "$$uv/bin/pip" install --quiet uv==$(UV_VERSION); } || exit 1; \
	compile() { "$$uv/bin/uv" pip compile --quiet --no-progress --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command 'make lock' $(LOCK_ARGS) "$$@"; }; \
	compile pyproject.toml --extra dev -o requirements-dev.lock \
	&& compile pyproject.toml -c requirements-dev.lock -o requirements.lock \
	&& printf '%s\n' mypy setuptools jsonpatch | compile - -c requirements-dev.lock -o requirements-build.lock

# Pins the Dockerfile's base image to the digest its tag has now in the registry (needs one
# reachable, and docker buildx, crane or skopeo); writes nothing when it cannot resolve it.
pin-image:
	hack/pin-image.sh

# Compiles the placement engine with mypyc, in place (about 40 s, a C compiler and Python's
# headers needed), as the container image ships it; again whenever an engine source changed,
# else nothing. Importing webhook refuses compiled modules older than their sources.
# clean-compiled goes back to the interpreted engine.
compile: install
	PYTHON=$(BIN)/python hack/compile-engine.sh

clean-compiled:
	rm -f webhook/engine/native.sha256 webhook/engine/*.so

# Starts the webhook over TLS on 127.0.0.1:8443 with the built-in default policy;
# certificates for 127.0.0.1/localhost are issued into $(CERTS)/ (ca.crt verifies them).
run: install
	PYTHON=$(BIN)/python hack/compile-engine.sh --if-possible
	$(BIN)/preemptguard serve --self-signed $(CERTS) --host 127.0.0.1 --port 8443 --metrics-port 9090

test: lint typecheck compile control-plane kustomize helm promtool jobset-controller
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

# The fast tier: no Go, no C compiler (the engine interpreted unless compiled already), no
# servers started; about a minute and a half on 2 cores. `make test` is the whole suite.
unit: install
	$(BIN)/pytest -m "not e2e and not slow and not tools"

e2e: install compile control-plane kustomize jobset-controller
	$(BIN)/pytest -m e2e

# Builds (once) or finds etcd, kube-apiserver, kube-scheduler and kube-controller-manager of both
# releases the end-to-end tests run: 1.37.2 with Go from the Go module proxy (~25 minutes on 2
# cores; KUBEBUILDER_ASSETS stands in for it when set) and 1.20.2 from Debian's source package
# (~13 minutes; KUBEBUILDER_ASSETS never applies to it).
control-plane:
	hack/control-plane-binaries-1.37.sh >/dev/null
	env -u KUBEBUILDER_ASSETS hack/control-plane-binaries.sh >/dev/null

# Finds or builds (once, with Go) kustomize v5, which renders manifests/ for the tests.
kustomize:
	hack/kustomize.sh >/dev/null

# Finds or builds (once, with Go, ~10 minutes) helm v4, which lints, renders and installs
# charts/preemptguard in the tests.
helm:
	hack/helm.sh >/dev/null

# Finds or unpacks (once, from Debian's prometheus package; else builds with Go) promtool, which
# checks and tests the shipped alert rules.
promtool:
	hack/promtool.sh >/dev/null

# Finds or builds (once, with Go, a few minutes) the JobSet controller, which takes JobSets
# through their lives in the end-to-end tests.
jobset-controller:
	hack/jobset-controller.sh >/dev/null

check-examples: install
	$(BIN)/preemptguard check -f examples/ || test $$? -eq 1

# Refreshes every file derived from another (policy copies, exported admission policies, webhook
# rules, the chart's alert rules, generated docs); `hack/generate.py --check` lists the stale ones
# and writes nothing, as tests/test_generated.py does.
generate: install
	PYTHON=$(BIN)/python hack/compile-engine.sh --if-possible
	$(BIN)/python hack/generate.py

# Prints figures and ratios measured in one run (asserts none): the engine and `check` against a
# bare YAML parse; `serve` against an always-allow app on the same stack, driven by hey
# (hack/hey.sh finds or builds it); pod creates through both releases' API servers.
bench: install compile control-plane kustomize
	hack/hey.sh >/dev/null
	$(BIN)/python benchmarks/engine_bench.py
	$(BIN)/python benchmarks/server_bench.py
	$(BIN)/python benchmarks/e2e_bench.py --release 1.37 --admission-policies
	$(BIN)/python benchmarks/e2e_bench.py --release 1.20

# The long fuzzing run (seeded, structure-aware; the suite runs a few thousand of the same
# cases): 100,000 reviews through the admission app, CLI inputs, and check's answers to reviews
# compared with the server's. Reproduce one failure with --case N --show.
fuzz: install compile
	$(BIN)/python benchmarks/fuzz.py --reviews 100000 --cli 5000 --cli-reviews 2000

clean: clean-compiled
	rm -rf $(VENV) $(CERTS) .pytest_cache .mypy_cache .ruff_cache .hypothesis
