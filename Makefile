# configstamp — see README.md. Everything a target needs is built into ./bin
# from the Go module proxy and cached there.

LOCALBIN ?= $(CURDIR)/bin
export CONFIGSTAMP_BIN := $(LOCALBIN)
GO ?= go
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

.PHONY: lint
lint: vet golangci-lint ## gofmt check, go vet and golangci-lint (.golangci.yml).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: build controlplane controller-gen lint ## Unit, integration and end-to-end tests (starts local control planes).
	$(GO) test -count=1 -timeout 40m $(GOTEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Unit tests only (no control plane).
	$(GO) test -count=1 ./controllers/... ./webhook/... ./certs/... ./cmd/...

##@ Build

.PHONY: build
build: $(LOCALBIN)/configstamp ## Build bin/configstamp.

$(LOCALBIN)/configstamp: $(shell git ls-files '*.go' 2>/dev/null) go.mod go.sum
	$(GO) build -trimpath -o $@ ./cmd

.PHONY: run
run: build ## Run configstamp against $$KUBECONFIG (self-managed certificate, webhook on 127.0.0.1:9443).
	$(LOCALBIN)/configstamp --kubeconfig=$${KUBECONFIG:?set KUBECONFIG} --namespace=configstamp-system \
	  --cert-mode=self --webhook-url=https://127.0.0.1:9443 --webhook-port=9443 \
	  --health-probe-bind-address=127.0.0.1:8081 --metrics-bind-address=127.0.0.1:8080 --log-format=console

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

##@ kubectl plugin

.PHONY: plugin
plugin: $(LOCALBIN)/kubectl-configstamp ## Build bin/kubectl-configstamp (put it on PATH to run `kubectl configstamp`).

$(LOCALBIN)/kubectl-configstamp: $(shell git ls-files 'cmd/kubectl-configstamp/*.go' 'controllers/*.go' 2>/dev/null) go.mod go.sum
	$(GO) build -trimpath -o $@ ./cmd/kubectl-configstamp
