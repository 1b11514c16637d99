# configstamp — see README.md. Everything a target needs is built into ./bin
# from the Go module proxy and cached there.

LOCALBIN ?= $(CURDIR)/bin
export CONFIGSTAMP_BIN := $(LOCALBIN)
GO ?= go
# Every go command of every target, and those the tests run, builds with
# -trimpath and without cgo, as the Dockerfile, the node's images, the kubelet
# and the release always built: one set of compiled packages in the build
# cache, where each other set of flags compiled every package again (on a
# fresh machine, minutes of CPU). The race detector needs cgo: its go test
# sets CGO_ENABLED=1.
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
export CGO_ENABLED ?= 0
GOTEST_FLAGS ?=
DEMO_DIR ?= $(CURDIR)/_output/demo

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...

GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint into bin/.

$(GOLANGCI_LINT):
	@echo "==> installing golangci-lint $(GOLANGCI_LINT_VERSION) from the Go module proxy (first time: ~2-5 min on 2 cores)"
	@mkdir -p $(LOCALBIN)
	GOBIN=$(LOCALBIN)/.golangci-lint $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/.golangci-lint/golangci-lint $@ && rmdir $(LOCALBIN)/.golangci-lint

# actionlint checks .github/workflows (and runs shellcheck on their scripts when
# shellcheck is on PATH, as on GitHub's runners).
ACTIONLINT_VERSION ?= v1.7.12
ACTIONLINT := $(LOCALBIN)/actionlint-$(ACTIONLINT_VERSION)

.PHONY: actionlint
actionlint: $(ACTIONLINT) ## Install actionlint into bin/.

$(ACTIONLINT):
	@echo "==> installing actionlint $(ACTIONLINT_VERSION) from the Go module proxy"
	@mkdir -p $(LOCALBIN)
	GOBIN=$(LOCALBIN)/.actionlint $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	mv $(LOCALBIN)/.actionlint/actionlint $@ && rmdir $(LOCALBIN)/.actionlint

# Commit subjects after a fixed base are at most 72 characters (hack/commit-msg;
# a shallow clone without the base skips the check, saying so).
.PHONY: commit-msg-check
commit-msg-check: ## Check that every commit subject since hack/commit-msg's base is at most 72 characters.
	hack/commit-msg --range

# The README's benchmark table names no commit older than the last release
# (none before the first: hack/bench-table-check).
.PHONY: bench-table-check
bench-table-check: ## Check that the README's benchmark table names no commit older than the last release tag.
	hack/bench-table-check README.md

.PHONY: lint
lint: vet golangci-lint actionlint commit-msg-check bench-table-check ## gofmt check, go vet, golangci-lint (.golangci.yml), actionlint (.github/workflows), commit subjects, the README's bench table.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...
	$(ACTIONLINT)

# make test runs in two lanes at once. The suites on the machine's one real
# node (test/localcp Options.RealNode) take its lock one after another, so
# they are a lane of their own, one package at a time (hack/testlane -p 1:
# test/localcp's two tests run while test/realnode's binary is built): the
# real-node lane, the longest. What it runs (the node's binaries and
# images) is built first, alone; then the lane starts
# and, beside it, the rest lane: the tests of every other package
# (hack/testlane, $(GOTEST_P) packages at once; inside a package whose tests each run a configstamp of
# their own, -parallel $(GOTEST_PARALLEL)) and, beside that, the checks (see
# test-checks). The suites mostly wait (for debounces, windows, the kubelet),
# so on a fresh machine the checks' builds take the CPU the suites leave idle
# (at a lower priority) instead of adding their minutes before or after them.
# (In one go test of ./..., a real-node package waiting for the lock held one
# of the -p slots idle.) make lint is not part of make test: CI runs it beside
# (.ci/run, .github/workflows/lint.yml). Each lane is a make of its own: a
# failure in one does not stop the other. Their output is on stdout, go
# test's lines prefixed [real-node], [rest], [checks] or [race], and in
# $(TEST_OUT)/<lane>.log; a summary with each lane's time ends the run.
REALNODE_PKGS := ./test/localcp ./test/realnode
# How many real-node tests run side by side, each on a configstamp of its own
# (6 made pods miss their 2-minute readiness on a fresh machine's load; the
# longest first, which put the heaviest together, failed two tests' bounds).
REALNODE_PARALLEL ?= 4
GOTEST_P ?= 2
# How many tests of one package the rest lane runs side by side: the suites
# whose tests each run a configstamp of their own (framework.Env.Lane).
GOTEST_PARALLEL ?= 8
TEST_OUT ?= $(CURDIR)/_output/test
# The rest lane's longest packages, started first (testlane builds and starts
# packages in the order given): the lane's last minutes are then short ones side by side,
# not one long suite alone.
REST_FIRST := ./test/safety ./test/chaos ./test/pin ./test/adversarial ./test/plugin ./test/e2e ./test/kinds ./test/manifests
# test/argo runs Argo Rollouts' real controller, built from its Go module:
# make test-argo, not make test (see there); test/eso the External Secrets
# Operator's, make test-eso; test/trust cert-manager's trust-manager on the
# real node, make test-trust.
ARGO_PKGS := ./test/argo
ESO_PKGS := ./test/eso
TRUST_PKGS := ./test/trust
# Every package but the real-node ones, test/argo, test/eso and test/trust, as
# import paths, REST_FIRST first.
REST_PKGS = $(shell $(GO) list $(REST_FIRST)) $(filter-out $(shell $(GO) list $(REALNODE_PKGS) $(ARGO_PKGS) $(ESO_PKGS) $(TRUST_PKGS) $(REST_FIRST)),$(shell $(GO) list ./...))
# What every test run of make test shares: the suites run the manager built
# once (bin/configstamp, by the build target) instead of linking their own
# (framework.ManagerBinary), and their builds vet nothing (make lint runs go vet
# on every package): on two cores, minutes of CPU each run.
GOTEST_ENV := CONFIGSTAMP_TEST_MANAGER=$(LOCALBIN)/configstamp
GOTEST_COMMON := -count=1 -vet=off
TEST_REALNODE_DEPS := build controlplane realnode node-images $(LOCALBIN)/testlane

.PHONY: test test-realnode test-rest test-checks
test: ## Unit, integration and end-to-end tests (starts local control planes), the release check, a smoke run of the bench (not lint: make lint).
	@mkdir -p $(TEST_OUT) && rm -f $(TEST_OUT)/*.log $(TEST_OUT)/*.log.rc $(TEST_OUT)/*.log.time
	@$(MAKE) --no-print-directory $(TEST_REALNODE_DEPS)
	@$(MAKE) --no-print-directory test-realnode & lane=$$!; \
	$(MAKE) --no-print-directory test-rest; rest=$$?; \
	wait $$lane; realnode=$$?; \
	hack/test-lanes.sh summary $(TEST_OUT)/real-node.log $(TEST_OUT)/rest.log $(TEST_OUT)/checks.log \
		$(TEST_OUT)/race.log; \
	[ $$realnode = 0 ] && [ $$rest = 0 ]

# The real-node lane (see test). It starts with the real node's preflight
# (hack/realnode-preflight.sh): a host that cannot run the real node (e.g.
# cgroup v2 inside a container whose cgroup root holds processes) fails the
# lane with the reason, unless CONFIGSTAMP_REALNODE_UNSUPPORTED=skip, which
# skips it and says so in the summary (and in a GitHub Actions annotation).
test-realnode: $(TEST_REALNODE_DEPS)
	@GO=$(GO) hack/realnode-preflight.sh $(TEST_OUT)/real-node.log; rc=$$?; \
	if [ $$rc = 10 ]; then exit 0; elif [ $$rc != 0 ]; then exit $$rc; fi; \
	hack/test-lanes.sh run real-node $(TEST_OUT)/real-node.log \
		env $(GOTEST_ENV) $(LOCALBIN)/testlane -p 1 -o $(TEST_OUT)/bin/real-node \
		-testflags "-count=1 -timeout 40m -parallel $(REALNODE_PARALLEL) $(GOTEST_FLAGS)" $(REALNODE_PKGS)

# The rest lane (see test): its tests and, beside them, the checks. The
# tests run through hack/testlane, not go test -p: go test counts builds and
# test runs against one limit, so while its two longest packages ran nothing
# was built, and the lane's last minutes were its short packages compiled and
# linked one by one. testlane builds each package's test binary in order
# (at nice $(TESTLANE_NICE): the running suites keep the CPU they time) while
# up to $(GOTEST_P) built ones run.
# (A fresh run at nice 5 failed an install test's bound on the real node
# once: the builds took CPU from the real-node lane's first minutes. The
# rest lane ends minutes before the real-node lane; the checks, at nice 15,
# further still.)
TESTLANE_NICE ?= 10
test-rest: build controlplane controller-gen $(LOCALBIN)/testlane
	@$(MAKE) --no-print-directory test-checks & checks=$$!; \
	hack/test-lanes.sh run rest $(TEST_OUT)/rest.log \
		env $(GOTEST_ENV) $(LOCALBIN)/testlane -p $(GOTEST_P) -nice $(TESTLANE_NICE) -o $(TEST_OUT)/bin/rest \
		-testflags "-count=1 -timeout 40m -parallel $(GOTEST_PARALLEL) $(GOTEST_FLAGS)" $(REST_PKGS); rest=$$?; \
	wait $$checks; checks=$$?; \
	[ $$rest = 0 ] && [ $$checks = 0 ]

$(LOCALBIN)/testlane: $(wildcard hack/testlane/*.go)
	$(GO) build -o $@ ./hack/testlane

# The rest lane's checks (see test), beside its tests: the builds of
# the race test (webhook/live/flight: the live reads' sharing, which imports
# only the standard library, so the race build compiles no client-go: 60 CPU-s
# on a fresh machine, against 209 for webhook/live), of release-check-host
# (which then runs) and of the bench, at a lower CPU priority than the suites,
# which time what configstamp does; then bench-smoke and the race test.
# bench-smoke runs at the suites' priority: it starts a control plane like
# theirs, and at nice 15 beside them (CI, stop 50) its API server created 14
# ConfigMaps a second and reset a Deployment CREATE past its request timeout.
RACE_PKGS := ./webhook/live/flight/
test-checks:
	@hack/test-lanes.sh run checks $(TEST_OUT)/checks.log $(MAKE) --no-print-directory test-checks-steps; checks=$$?; \
	hack/test-lanes.sh run race $(TEST_OUT)/race.log env CGO_ENABLED=1 $(GO) test -race $(GOTEST_COMMON) $(RACE_PKGS); race=$$?; \
	[ $$race = 0 ] && [ $$checks = 0 ]

.PHONY: test-checks-steps
test-checks-steps:
	nice -n 15 $(MAKE) --no-print-directory test-race-build release-check-host bench-build
	$(MAKE) --no-print-directory bench-smoke

.PHONY: test-race-build
test-race-build:
	CGO_ENABLED=1 $(GO) test -race -vet=off -c -o $(TEST_OUT)/bin/ $(RACE_PKGS)

# make test-compat: test/e2e against the oldest Kubernetes the README promises
# (COMPAT_K8S_MINOR, hack/controlplane.mk), not part of make test. The suites'
# control plane takes the Kubernetes components from $$CONFIGSTAMP_K8S_BIN and
# fails unless the API server reports $$CONFIGSTAMP_K8S_VERSION.
COMPAT_PKGS ?= ./test/e2e/

.PHONY: test-compat
test-compat: build controlplane-compat ## test/e2e against the oldest supported Kubernetes (1.30; builds its control plane into bin/k8s-1.30 first).
	@echo "==> test/e2e against Kubernetes $(COMPAT_K8S_VERSION) ($(COMPAT_K8S_BIN))"
	@start=$$(date +%s); \
	CONFIGSTAMP_K8S_BIN=$(COMPAT_K8S_BIN) CONFIGSTAMP_K8S_VERSION=$(COMPAT_K8S_VERSION) \
		$(GO) test -count=1 -p 1 -timeout 30m $(GOTEST_FLAGS) $(COMPAT_PKGS); rc=$$?; \
	echo "==> test-compat (Kubernetes $(COMPAT_K8S_VERSION)): exit $$rc in $$(( $$(date +%s) - start ))s"; exit $$rc

# make test-argo: test/argo, configstamp's --kinds-config with Argo Rollouts'
# real controller, not part of make test: like test-compat, a run against
# another project's binary, which it builds from that project's Go module
# (hack/argo-rollouts.sh, cached in bin/): on a fresh machine 740 s of CPU
# (395 s on two idle cores), a fifth of all make test did. CI runs it after
# make test (.ci/run, the compat job of .github/workflows/test.yml);
# test/kinds, in make test, covers the Rollout kind with the status written
# by the test.
.PHONY: test-argo
test-argo: build controlplane argo-rollouts ## test/argo: configstamp with Argo Rollouts' real controller (builds it into bin/ first; not part of make test).
	@start=$$(date +%s); \
	env $(GOTEST_ENV) $(GO) test $(GOTEST_COMMON) -timeout 20m $(GOTEST_FLAGS) $(ARGO_PKGS); rc=$$?; \
	echo "==> test-argo: exit $$rc in $$(( $$(date +%s) - start ))s"; exit $$rc

# make test-eso: test/eso, configstamp beside the External Secrets Operator's
# real controller (hack/external-secrets.sh builds it from its Go module, fake
# provider only, cached in bin/), not part of make test for the same reason as
# test-argo. CI runs it after make test (.ci/run).
.PHONY: test-eso
test-eso: build controlplane external-secrets ## test/eso: configstamp beside the External Secrets Operator's real controller (builds it into bin/ first; not part of make test).
	@start=$$(date +%s); \
	env $(GOTEST_ENV) $(GO) test $(GOTEST_COMMON) -timeout 20m $(GOTEST_FLAGS) $(ESO_PKGS); rc=$$?; \
	echo "==> test-eso: exit $$rc in $$(( $$(date +%s) - start ))s"; exit $$rc

# make test-trust: test/trust, configstamp beside cert-manager's trust-manager
# (hack/trust-manager.sh builds it from its Go module, cached in bin/) on the
# real node, where the containers that reject a bad CA bundle run. Not part of
# make test for the same reason as test-argo, and because make test's real-node
# lane holds the one real node a machine runs; CI runs it after make test
# (.ci/run).
.PHONY: test-trust
test-trust: $(TEST_REALNODE_DEPS) trust-manager ## test/trust: configstamp beside cert-manager's trust-manager on the real node (builds it into bin/ first; not part of make test).
	@start=$$(date +%s); \
	env $(GOTEST_ENV) $(GO) test $(GOTEST_COMMON) -timeout 20m $(GOTEST_FLAGS) $(TRUST_PKGS); rc=$$?; \
	echo "==> test-trust: exit $$rc in $$(( $$(date +%s) - start ))s"; exit $$rc

.PHONY: test-unit
test-unit: ## Unit tests only (no control plane).
	$(GO) test -count=1 ./controllers/... ./webhook/... ./certs/... ./cmd/...

##@ Build

.PHONY: build
build: $(LOCALBIN)/configstamp ## Build bin/configstamp.

$(LOCALBIN)/configstamp: $(shell git ls-files '*.go' 2>/dev/null) go.mod go.sum
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd

.PHONY: run
run: build ## Run configstamp against $$KUBECONFIG (self-managed certificate, webhook on 127.0.0.1:9443).
	$(LOCALBIN)/configstamp --kubeconfig=$${KUBECONFIG:?set KUBECONFIG} --namespace=configstamp-system \
	  --cert-mode=self --webhook-url=https://127.0.0.1:9443 --webhook-port=9443 \
	  --health-probe-bind-address=127.0.0.1:8081 --metrics-bind-address=127.0.0.1:8080 --log-format=console \
	  --shutdown-delay=0s

##@ Demo

.PHONY: demo
demo: build controlplane ## Start a local control plane, run configstamp, change a ConfigMap and show the rollout.
	DEMO_DIR=$(DEMO_DIR) hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop the demo's configstamp and control plane.
	DEMO_DIR=$(DEMO_DIR) hack/demo.sh down

include hack/controlplane.mk

include hack/manifests.mk
include hack/bench.mk
include hack/chaos.mk
include hack/images.mk
include hack/release.mk

##@ kubectl plugin

.PHONY: plugin
plugin: $(LOCALBIN)/kubectl-configstamp ## Build bin/kubectl-configstamp (put it on PATH to run `kubectl configstamp`).

$(LOCALBIN)/kubectl-configstamp: $(shell git ls-files 'cmd/kubectl-configstamp/*.go' 'controllers/*.go' 2>/dev/null) go.mod go.sum
	$(GO) build -trimpath -o $@ ./cmd/kubectl-configstamp

##@ Release

# The image every target below builds, pushes, renders and deploys: set it once,
# e.g. `make docker-buildx build-installer IMG=registry.example/configstamp:v0.1.0`.
# The default is the image config/manager/kustomization.yaml names.
IMG ?= ghcr.io/configstamp/configstamp:v0.1.0
# The version --version prints and configstamp_build_info carries (also set in
# bin/configstamp by `make build`): the nearest tag, commits since, -dirty.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS ?= -X main.version=$(VERSION) -X main.revision=$(REVISION)
CONTAINER_TOOL ?= docker
# docker-buildx: the Go compiler cross-compiles in a builder of the build
# machine's platform; only the distroless stage is per platform.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le
# The overlay build-installer and deploy render: config/default (cert-manager),
# config/selfsigned or config/namespaced.
INSTALL_OVERLAY ?= config/default
KUBECTL ?= kubectl
export KUBECTL
# The version the installers label every object with
# (app.kubernetes.io/version, where `kubectl configstamp version` reads the
# server's): empty by default, since a checkout's IMG is the last release's
# image, whose tag says its version; `make release-installers` sets it to the
# release's version (hack/build-installer.sh).
INSTALL_VERSION ?=
export INSTALL_VERSION

.PHONY: docker-build docker-push docker-buildx build-installer deploy undeploy
docker-build: ## Build the image $(IMG) with the version stamped in.
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMG) .

docker-push: ## Push the image $(IMG).
	$(CONTAINER_TOOL) push $(IMG)

docker-buildx: ## Build and push $(IMG) for every platform in PLATFORMS (docker buildx).
	@tmp=$$(mktemp) && trap 'rm -f "$$tmp"' EXIT && \
	awk '!done && /^FROM /{sub(/^FROM /, "FROM --platform=$$BUILDPLATFORM "); done=1} {print}' Dockerfile >"$$tmp" && \
	set -x && \
	{ $(CONTAINER_TOOL) buildx inspect configstamp-builder >/dev/null 2>&1 || \
	  $(CONTAINER_TOOL) buildx create --name configstamp-builder >/dev/null; } && \
	$(CONTAINER_TOOL) buildx build --builder configstamp-builder --push --platform=$(PLATFORMS) \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --tag $(IMG) -f "$$tmp" .

build-installer: ## Write dist/install.yaml: $(INSTALL_OVERLAY) with the image $(IMG), one file for kubectl apply.
	hack/build-installer.sh "$(IMG)" "$(INSTALL_OVERLAY)" dist/install.yaml
	@echo "dist/install.yaml: $(INSTALL_OVERLAY) with image $(IMG)"

# ignore-not-found=true lets undeploy run twice.
ignore-not-found ?= false

deploy: ## Install $(INSTALL_OVERLAY) with the image $(IMG) into the cluster of the current kubeconfig.
	hack/build-installer.sh "$(IMG)" "$(INSTALL_OVERLAY)" | $(KUBECTL) apply -f -

undeploy: ## Delete what deploy installed (ignore-not-found=true to ignore missing objects).
	hack/build-installer.sh "$(IMG)" "$(INSTALL_OVERLAY)" | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -
