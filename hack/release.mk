# Release artefacts of the kubectl plugin and its krew manifest. Included from
# the main Makefile (VERSION, LOCALBIN and GO come from there).
#
#   make plugin-dist      # cross-compile the plugin into dist/plugin/ (6 targets)
#   make krew-manifest    # plugin-dist, then dist/: the archives, checksums.txt, configstamp.yaml
#   make krew-validate    # krew-manifest, then krew's own validation of dist/configstamp.yaml, offline
#   make release-installers  # dist/release/install.yaml, install-selfsigned.yaml: IMG, labelled with the version
#   make release-rules    # dist/release/prometheus-rules.yaml, its runbook URLs at the version's tag
#   make release-files-check # both, then checks them (hack/releasefiles)
#   make release-check    # krew-validate and release-files-check (IMG: a placeholder digest)
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

# The release's other files, into $(RELEASE_FILES): one installer per
# overlay a user applies as it is (config/default: install.yaml; the others:
# install-<overlay>.yaml), the image IMG (the release passes the digest it
# pushed) and every object labelled app.kubernetes.io/version=$(PLUGIN_VERSION)
# (INSTALL_VERSION, hack/build-installer.sh), which `kubectl configstamp
# version` reads: an image pinned by digest names no version. config/namespaced
# is no release file: it lists the namespaces it watches, which only its user
# knows (a base to edit: docs/scoping.md). And the Prometheus rules in the rule
# file format, every runbook_url at the tag instead of main.
RELEASE_FILES ?= $(RELEASE_DIST)/release
RELEASE_OVERLAYS ?= default selfsigned
# release-check's image: a placeholder digest (no image is built or pulled).
RELEASE_CHECK_IMG ?= ghcr.io/configstamp/configstamp@sha256:0000000000000000000000000000000000000000000000000000000000000000

.PHONY: release-installers release-rules release-files-check
release-installers: ## Write one installer per overlay in RELEASE_OVERLAYS into $(RELEASE_FILES)/: image $(IMG), labelled app.kubernetes.io/version=$(PLUGIN_VERSION).
	@mkdir -p $(RELEASE_FILES)
	@set -e; for overlay in $(RELEASE_OVERLAYS); do \
		file=install-$$overlay.yaml; [ "$$overlay" = default ] && file=install.yaml; \
		INSTALL_VERSION=$(PLUGIN_VERSION) hack/build-installer.sh "$(IMG)" config/$$overlay $(RELEASE_FILES)/$$file; \
		echo "$(RELEASE_FILES)/$$file: config/$$overlay, image $(IMG), version $(PLUGIN_VERSION)"; \
	done

release-rules: ## Write $(RELEASE_FILES)/prometheus-rules.yaml: config/prometheus/rules.yaml's groups, runbook URLs at $(PLUGIN_VERSION).
	$(GO) run ./hack/releasefiles rules -version=$(PLUGIN_VERSION) -in=config/prometheus/rules.yaml -out=$(RELEASE_FILES)/prometheus-rules.yaml

release-files-check: release-installers release-rules ## Write the installers and the rules, then check them: image by digest, version label, no example namespace, runbooks at the tag.
	$(GO) run ./hack/releasefiles check -version=$(PLUGIN_VERSION) -image="$(IMG)" -dir=$(RELEASE_FILES)

release-check: krew-validate ## Cross-compile the plugin for the six targets, write the archives and the krew manifest, validate it with krew; write and check the installers and the rules.
	@rm -rf $(RELEASE_FILES)
	$(MAKE) --no-print-directory release-files-check IMG=$(RELEASE_CHECK_IMG)

# make test's release check: the same steps and krew's same validation for the
# host's platform alone, into _output/ (dist/ stays the release's). The five
# other targets' cross-compilation is a release concern: release-check and the
# release workflow build all six.
RELEASE_CHECK_HOST_DIST ?= $(CURDIR)/_output/release-check
.PHONY: release-check-host
release-check-host: ## release-check for the host's GOOS/GOARCH alone, into _output/release-check (make test runs it).
	$(MAKE) --no-print-directory krew-validate PLUGIN_PLATFORMS="$$($(GO) env GOOS)/$$($(GO) env GOARCH)" \
		PLUGIN_DIST=$(RELEASE_CHECK_HOST_DIST)/plugin RELEASE_DIST=$(RELEASE_CHECK_HOST_DIST)
