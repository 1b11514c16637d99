# Local Kubernetes control plane binaries (see test/localcp and hack/localcp).
#
# Included from the main Makefile; also usable alone:
#   make -f hack/controlplane.mk controlplane
#
# Everything is built with `go build` inside the pinned tools modules under
# hack/tools, so a machine with Go and the module proxy is enough. The binaries
# are real file targets that depend on their tools module's go.mod/go.sum: a
# second `make controlplane` does nothing, a version bump rebuilds.
# Needs GNU make >= 4.3 (grouped targets, `&:`).

LOCALBIN ?= $(CURDIR)/bin
GO ?= go
CP_BIN := $(abspath $(LOCALBIN))
# Directory of this fragment, fixed at parse time (MAKEFILE_LIST grows later).
CP_TOOLS := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))tools)

# Versions come from the tools modules, so go.mod is the only place to bump them.
cp_modver = $(shell awk '$$1 == "require" && $$2 == "$(2)" { print $$3 } $$1 == "$(2)" { print $$2 }' $(CP_TOOLS)/$(1)/go.mod | head -n 1)
K8S_VERSION := $(call cp_modver,k8s,k8s.io/kubernetes)
ETCD_VERSION := $(call cp_modver,etcd,go.etcd.io/etcd/server/v3)
KWOK_VERSION := $(call cp_modver,kwok,sigs.k8s.io/kwok)
K8S_MAJOR := $(patsubst v%,%,$(word 1,$(subst ., ,$(K8S_VERSION))))
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))

CP_K8S_BINS := $(CP_BIN)/kube-apiserver $(CP_BIN)/kube-controller-manager $(CP_BIN)/kube-scheduler
# The real node's (localcp Options.RealNode): a group of their own, so that
# building them never rebuilds the control plane and `make controlplane` does
# not need them.
CP_NODE_BINS := $(CP_BIN)/kubelet $(CP_BIN)/kube-proxy
CP_ALL := $(CP_BIN)/etcd $(CP_K8S_BINS) $(CP_BIN)/kwok $(CP_BIN)/kwok-stages.yaml

# The version variables feed `kube-apiserver --version` and the /version
# endpoint; without them the binaries report v0.0.0-master.
CP_K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(K8S_MAJOR) \
	-X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)

##@ Local control plane

.PHONY: controlplane clean-controlplane
controlplane: $(CP_ALL) ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok into ./bin (cached).

# `go build -o` leaves an up-to-date output untouched, so touch the outputs:
# otherwise a touched-but-unchanged go.mod would rebuild on every run.
$(CP_K8S_BINS) &: $(CP_TOOLS)/k8s/go.mod $(CP_TOOLS)/k8s/go.sum
	@echo "==> building kube-apiserver, kube-controller-manager, kube-scheduler from k8s.io/kubernetes $(K8S_VERSION) (first time: ~5 min on 2 cores)"
	@mkdir -p $(CP_BIN)
	cd $(CP_TOOLS)/k8s && $(GO) build -trimpath -ldflags "$(CP_K8S_LDFLAGS)" -o $(CP_BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler
	@touch $(CP_K8S_BINS)

$(CP_BIN)/etcd: $(CP_TOOLS)/etcd/go.mod $(CP_TOOLS)/etcd/go.sum
	@echo "==> building etcd from go.etcd.io/etcd/server/v3 $(ETCD_VERSION) (first time: ~1.5 min on 2 cores)"
	@mkdir -p $(CP_BIN)
	cd $(CP_TOOLS)/etcd && $(GO) build -trimpath -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3
	@touch $@

$(CP_BIN)/kwok: $(CP_TOOLS)/kwok/go.mod $(CP_TOOLS)/kwok/go.sum
	@echo "==> building kwok from sigs.k8s.io/kwok $(KWOK_VERSION) (first time: ~2 min on 2 cores)"
	@mkdir -p $(CP_BIN)
	cd $(CP_TOOLS)/kwok && $(GO) build -trimpath -ldflags "-s -w" -o $@ sigs.k8s.io/kwok/cmd/kwok
	@touch $@

# kwok exits with "no stages found" unless given stages. This is what the
# module's kustomize/stage/fast kustomization renders to (node-initialize,
# node-heartbeat-with-lease, pod-ready/complete/delete), without needing
# kubectl: the kustomizations only list resources, so concatenating is enough.
CP_KWOK_STAGE_DIRS := node/fast node/heartbeat-with-lease pod/fast
$(CP_BIN)/kwok-stages.yaml: $(CP_BIN)/kwok
	@echo "==> rendering kwok stages from sigs.k8s.io/kwok $(KWOK_VERSION)"
	@set -e; \
	root=$$(cd $(CP_TOOLS)/kwok && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok); \
	test -n "$$root" || { echo "sigs.k8s.io/kwok not in the module cache" >&2; exit 1; }; \
	for d in $(CP_KWOK_STAGE_DIRS); do \
		for f in $$(sed -n 's/^- //p' "$$root/kustomize/stage/$$d/kustomization.yaml"); do \
			echo "---"; echo "# sigs.k8s.io/kwok@$(KWOK_VERSION) kustomize/stage/$$d/$$f"; \
			cat "$$root/kustomize/stage/$$d/$$f"; \
		done; \
	done > $@.tmp; \
	mv $@.tmp $@

clean-controlplane: ## Remove the control plane binaries.
	rm -f $(CP_ALL) $(CP_NODE_BINS) $(COMPAT_K8S_BINS)

# The oldest Kubernetes the README promises, for make test-compat: its
# kube-apiserver, kube-controller-manager and kube-scheduler, built the same
# way from their own tools module (hack/tools/k8s-<minor>) into
# bin/k8s-<minor>. etcd and kwok stay the ones above (kwok plays any
# version's kubelet; the API server talks etcd's v3 API, which etcd 3.6
# serves as 3.5 did).
COMPAT_K8S_MINOR ?= 1.30
COMPAT_K8S_TOOLS := $(CP_TOOLS)/k8s-$(COMPAT_K8S_MINOR)
COMPAT_K8S_BIN := $(CP_BIN)/k8s-$(COMPAT_K8S_MINOR)
COMPAT_K8S_VERSION := $(call cp_modver,k8s-$(COMPAT_K8S_MINOR),k8s.io/kubernetes)
COMPAT_K8S_BINS := $(COMPAT_K8S_BIN)/kube-apiserver $(COMPAT_K8S_BIN)/kube-controller-manager $(COMPAT_K8S_BIN)/kube-scheduler
COMPAT_K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(COMPAT_K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(patsubst v%,%,$(word 1,$(subst ., ,$(COMPAT_K8S_VERSION)))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(COMPAT_K8S_VERSION)))

.PHONY: controlplane-compat
controlplane-compat: $(COMPAT_K8S_BINS) $(CP_BIN)/etcd $(CP_BIN)/kwok $(CP_BIN)/kwok-stages.yaml ## Build the oldest supported Kubernetes' kube-apiserver, kube-controller-manager, kube-scheduler into ./bin/k8s-1.30, and etcd and kwok (cached).

$(COMPAT_K8S_BINS) &: $(COMPAT_K8S_TOOLS)/go.mod $(COMPAT_K8S_TOOLS)/go.sum
	@echo "==> building kube-apiserver, kube-controller-manager, kube-scheduler from k8s.io/kubernetes $(COMPAT_K8S_VERSION) into $(COMPAT_K8S_BIN) (first time: ~17 min of CPU on 2 cores)"
	@mkdir -p $(COMPAT_K8S_BIN)
	cd $(COMPAT_K8S_TOOLS) && $(GO) build -trimpath -ldflags "$(COMPAT_K8S_LDFLAGS)" -o $(COMPAT_K8S_BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler
	@touch $(COMPAT_K8S_BINS)

# A real node (test/localcp Options.RealNode, hack/localcp --real-node): kubelet
# and kube-proxy from the same k8s.io/kubernetes, plus the host's containerd,
# runc, CNI plugins, iptables and conntrack (Debian packages).
.PHONY: realnode node-packages
realnode: $(CP_BIN)/etcd $(CP_K8S_BINS) $(CP_NODE_BINS) node-packages ## Build kubelet and kube-proxy (and the control plane) into ./bin and install containerd, runc, CNI plugins, iptables, conntrack (apt-get, if missing).

$(CP_NODE_BINS) &: $(CP_TOOLS)/k8s/go.mod $(CP_TOOLS)/k8s/go.sum
	@echo "==> building kubelet, kube-proxy from k8s.io/kubernetes $(K8S_VERSION) (first time: ~3 min on 2 cores)"
	@mkdir -p $(CP_BIN)
	cd $(CP_TOOLS)/k8s && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(CP_K8S_LDFLAGS)" -o $(CP_BIN)/ \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy
	@touch $(CP_NODE_BINS)

# Only when something is missing: apt-get needs root and the Debian mirror.
node-packages:
	@if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! command -v ctr >/dev/null \
		|| ! test -x /usr/lib/cni/bridge || ! command -v iptables >/dev/null || ! command -v conntrack >/dev/null; then \
		echo "==> installing containerd runc containernetworking-plugins iptables conntrack from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			containerd runc containernetworking-plugins iptables conntrack; \
	fi

# Argo Rollouts' controller, for test/argo (configstamp's --kinds-config with
# the real controller). The version is test/argo's argoModule.
ARGO_ROLLOUTS_VERSION := v1.8.3
ARGO_ROLLOUTS := $(CP_BIN)/argo-rollouts-controller-$(ARGO_ROLLOUTS_VERSION)

.PHONY: argo-rollouts
argo-rollouts: $(ARGO_ROLLOUTS) ## Build Argo Rollouts' controller from its Go module into ./bin (cached; test/argo runs it).

$(ARGO_ROLLOUTS):
	$(CP_TOOLS)/../argo-rollouts.sh $(ARGO_ROLLOUTS_VERSION) $@

# The External Secrets Operator's controller, for test/eso. The version is
# test/eso's esoModule.
EXTERNAL_SECRETS_VERSION := v0.16.2
EXTERNAL_SECRETS := $(CP_BIN)/external-secrets-$(EXTERNAL_SECRETS_VERSION)

.PHONY: external-secrets
external-secrets: $(EXTERNAL_SECRETS) ## Build the External Secrets Operator's controller (fake provider only) from its Go module into ./bin (cached; test/eso runs it).

$(EXTERNAL_SECRETS):
	$(CP_TOOLS)/../external-secrets.sh $(EXTERNAL_SECRETS_VERSION) $@

# cert-manager's trust-manager controller, for test/trust. The version is
# test/trust's trustModule.
TRUST_MANAGER_VERSION := v0.25.0
TRUST_MANAGER := $(CP_BIN)/trust-manager-$(TRUST_MANAGER_VERSION)

.PHONY: trust-manager
trust-manager: $(TRUST_MANAGER) ## Build cert-manager's trust-manager controller from its Go module into ./bin (cached; test/trust runs it).

$(TRUST_MANAGER):
	$(CP_TOOLS)/../trust-manager.sh $(TRUST_MANAGER_VERSION) $@
