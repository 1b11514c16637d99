# Release artefacts of the kubectl plugin and its krew manifest. Included from
# the main Makefile (VERSION, LOCALBIN and GO come from there).
#
#   make plugin-dist      # cross-compile the plugin into dist/plugin/ (6 targets)
#   make krew-manifest    # plugin-dist, then dist/: the archives, checksums.txt, configstamp.yaml
#   make krew-validate    # krew-manifest, then krew's own validation of dist/configstamp.yaml, offline
#   make release-check    # the same as krew-validate: all three, for the six targets
#   make release-check-host  # the same for the host's GOOS/GOARCH alone, in _output/ (make test runs it)
#
# A release (.github/workflows/release.yml) runs them with VERSION=vX.Y.Z, the
# tag; the archives and the manifest name that version, and the manifest's
# sha256 are those of the archives.

# krew wants a semantic version with a v: a tag (git describe on a tag, or
# VERSION=v1.2.3) is used as it is, anything else (no tag yet: a commit id)
# becomes v0.0.0-dev.
PLUGIN_VERSION = $(if $(filter v0% v1% v2% v3% v4% v5% v6% v7% v8% v9%,$(VERSION)),$(VERSION),v0.0.0-dev)
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
PLUGIN_DIST ?= dist/plugin
RELEASE_DIST ?= dist
# Where the release workflow uploads the archives: the manifest's uri.
RELEASE_URL ?= https://github.com/configstamp/configstamp/releases/download

# krew and validate-krew-manifest come from the pinned tools module
# hack/tools/krew (bump sigs.k8s.io/krew there), built like hack/controlplane.mk
# builds etcd and kwok.
RELEASE_TOOLS := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))tools/krew)
KREW_VERSION := $(shell awk '$$1 == "require" && $$2 == "sigs.k8s.io/krew" { print $$3 } $$1 == "sigs.k8s.io/krew" { print $$2 }' $(RELEASE_TOOLS)/go.mod | head -n 1)
KREW_BINS := $(abspath $(LOCALBIN))/krew $(abspath $(LOCALBIN))/validate-krew-manifest

##@ Release artefacts

.PHONY: plugin-dist krew-manifest krew-validate krew-tools release-check

plugin-dist: ## Cross-compile the plugin for linux, darwin, windows x amd64, arm64 into $(PLUGIN_DIST)/ (version $(PLUGIN_VERSION)).
	@rm -rf $(PLUGIN_DIST) && mkdir -p $(PLUGIN_DIST)
	@# -X main.version sets the plugin's version (cmd/kubectl-configstamp/main.go;
	@# "devel" without it): what `kubectl configstamp version` prints.
	@set -e; for p in $(PLUGIN_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
		echo "==> kubectl-configstamp $(PLUGIN_VERSION) $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath \
			-ldflags "-s -w -X main.version=$(PLUGIN_VERSION)" \
			-o $(PLUGIN_DIST)/$${os}_$${arch}/kubectl-configstamp$$ext ./cmd/kubectl-configstamp; \
	done

krew-manifest: plugin-dist ## Archive $(PLUGIN_DIST)/ with LICENSE, write checksums.txt and the krew manifest configstamp.yaml into $(RELEASE_DIST)/.
	SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 315532800)} \
	$(GO) run ./hack/krew -version=$(PLUGIN_VERSION) -plugins=$(PLUGIN_DIST) -license=LICENSE \
		-out=$(RELEASE_DIST) -url=$(RELEASE_URL)/$(PLUGIN_VERSION) -platforms="$(PLUGIN_PLATFORMS)"

krew-tools: $(KREW_BINS) ## Build krew and validate-krew-manifest ($(KREW_VERSION)) into ./bin (cached).

$(KREW_BINS) &: $(RELEASE_TOOLS)/go.mod $(RELEASE_TOOLS)/go.sum
	@echo "==> building krew and validate-krew-manifest from sigs.k8s.io/krew $(KREW_VERSION) (first time: ~1 min on 2 cores)"
	@mkdir -p $(LOCALBIN)
	cd $(RELEASE_TOOLS) && $(GO) build -trimpath -ldflags "-s -w" -o $(abspath $(LOCALBIN))/ \
		sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/cmd/validate-krew-manifest
	@touch $(KREW_BINS)

# validate-krew-manifest -skip-install: krew's structural validation (name =
# file name, semver, platforms' selectors supported and not overlapping, sha256
# well formed, bin and files). Without -skip-install it runs `kubectl krew
# install`, which downloads the uri: a release not yet published. So the install
# is done here with krew itself from the local archive (--archive), for each
# platform (KREW_OS/KREW_ARCH): krew checks the archive's sha256 against the
# manifest, extracts the files and links bin; then LICENSE must be installed, as
# validate-krew-manifest requires, and the host's binary must run.
krew-validate: krew-manifest $(KREW_BINS) ## Validate $(RELEASE_DIST)/configstamp.yaml with krew: structure, then an offline install of every platform's archive.
	$(abspath $(LOCALBIN))/validate-krew-manifest -manifest=$(RELEASE_DIST)/configstamp.yaml -skip-install
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	for p in $(PLUGIN_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=tar.gz; [ "$$os" = windows ] && ext=zip; \
		archive=$(RELEASE_DIST)/kubectl-configstamp_$(PLUGIN_VERSION)_$${os}_$${arch}.$$ext; \
		root=$$tmp/$${os}_$${arch}; \
		KREW_ROOT=$$root KREW_OS=$$os KREW_ARCH=$$arch KREW_NO_UPGRADE_CHECK=1 \
			$(abspath $(LOCALBIN))/krew install --manifest=$(RELEASE_DIST)/configstamp.yaml --archive=$$archive >$$root.log 2>&1 \
			|| { cat $$root.log; echo "krew install of $$archive failed" >&2; exit 1; }; \
		find $$root/store/configstamp -type f -name LICENSE | grep -q . \
			|| { echo "$$os/$$arch: krew installed no LICENSE" >&2; exit 1; }; \
		echo "krew installed configstamp $(PLUGIN_VERSION) for $$os/$$arch from $$archive"; \
	done; \
	host=$$($(GO) env GOOS)_$$($(GO) env GOARCH); \
	if [ -x $$tmp/$$host/bin/kubectl-configstamp ]; then \
		$$tmp/$$host/bin/kubectl-configstamp --help | grep -q '^Usage:' \
			|| { echo "the installed kubectl-configstamp does not run" >&2; exit 1; }; \
		echo "the krew-installed kubectl-configstamp runs on $$host"; \
	fi

release-check: krew-validate ## Cross-compile the plugin for the six targets, write the archives and the krew manifest, validate it with krew.

# make test's release check: the same steps and krew's same validation for the
# host's platform alone, into _output/ (dist/ stays the release's). The five
# other targets' cross-compilation is a release concern: release-check and the
# release workflow build all six.
RELEASE_CHECK_HOST_DIST ?= $(CURDIR)/_output/release-check
.PHONY: release-check-host
release-check-host: ## release-check for the host's GOOS/GOARCH alone, into _output/release-check (make test runs it).
	$(MAKE) --no-print-directory krew-validate PLUGIN_PLATFORMS="$$($(GO) env GOOS)/$$($(GO) env GOARCH)" \
		PLUGIN_DIST=$(RELEASE_CHECK_HOST_DIST)/plugin RELEASE_DIST=$(RELEASE_CHECK_HOST_DIST)
