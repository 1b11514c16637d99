# Kubernetes manifests (config/) and the tool that generates part of them.
#
# Included from the main Makefile; also usable alone:
#   make -f hack/manifests.mk manifests
#
# config/rbac/role.yaml is generated from the +kubebuilder:rbac markers in the
# Go code. config/webhook/manifests.yaml is written by hand (the webhook's
# selectors cannot be said with markers); test/manifests checks it against
# webhook.Configuration().

LOCALBIN ?= $(CURDIR)/bin
# Bumping the version here reinstalls controller-gen (the binary depends on this
# file); test/manifests fails when bin/controller-gen reports another version.
CONTROLLER_TOOLS_VERSION := v0.21.0
CONTROLLER_GEN := $(abspath $(LOCALBIN))/controller-gen
MANIFESTS_MK := $(abspath $(lastword $(MAKEFILE_LIST)))
MANIFESTS_ROOT := $(abspath $(dir $(MANIFESTS_MK))..)

##@ Manifests

.PHONY: controller-gen manifests render kinds-rbac
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen into $(LOCALBIN).

# `go install` leaves an up-to-date binary untouched, so touch it: otherwise a
# touched-but-unchanged fragment would reinstall on every run.
$(CONTROLLER_GEN): $(MANIFESTS_MK)
	@echo "==> installing controller-gen $(CONTROLLER_TOOLS_VERSION) into $(LOCALBIN)"
	@mkdir -p $(LOCALBIN)
	GOBIN=$(abspath $(LOCALBIN)) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	@touch $@

manifests: $(CONTROLLER_GEN) ## Regenerate config/rbac/role.yaml from the +kubebuilder:rbac markers.
	cd $(MANIFESTS_ROOT) && $(CONTROLLER_GEN) rbac:roleName=manager-role paths=./... output:rbac:artifacts:config=config/rbac

KINDS_DIR ?= config/kinds/argo-rollouts
kinds-rbac: ## Regenerate $(KINDS_DIR)/rbac.yaml, the least RBAC of the kinds in $(KINDS_DIR)/kinds.yaml.
	cd $(MANIFESTS_ROOT) && go run ./cmd --kinds-config=$(KINDS_DIR)/kinds.yaml --print-rbac > $(KINDS_DIR)/rbac.yaml

render: manifests ## Print the rendered config/default and config/selfsigned overlays (kubectl kustomize).
	@cd $(MANIFESTS_ROOT) && kubectl kustomize config/default && echo --- && kubectl kustomize config/selfsigned
