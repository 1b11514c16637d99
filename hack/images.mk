# Container images for the local node tests (see hack/images), built without
# Docker into docker archives that `ctr -n k8s.io images import` reads:
#
#   bin/images/pause.tar    registry.k8s.io/pause:3.10     (test/images/pause)
#   bin/images/testapp.tar  configstamp.test/testapp:dev   (test/images/testapp)
#   bin/images/configstamp.tar ghcr.io/configstamp/configstamp:v0.1.0 (./cmd, as the Dockerfile builds it,
#                              named as config/manager names the manager's image)
#
# Included from the main Makefile. The archives are real file targets that
# depend on their sources and the builder, so a second `make node-images` does
# nothing. References, users and binary paths are the presets in
# hack/images/node.go.

LOCALBIN ?= $(CURDIR)/bin
GO ?= go
# The module root, fixed at parse time (MAKEFILE_LIST grows later).
IMAGES_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
IMAGES_DIR := $(abspath $(LOCALBIN))/images
IMAGES_BUILDER := $(abspath $(LOCALBIN))/build-image

# Non-test Go files of a directory under the module root.
images_srcs = $(filter-out %_test.go,$(wildcard $(IMAGES_ROOT)/$(1)/*.go))

##@ Local control plane

.PHONY: node-images clean-node-images
node-images: $(IMAGES_DIR)/pause.tar $(IMAGES_DIR)/testapp.tar $(IMAGES_DIR)/configstamp.tar ## Build the node images into bin/images (pause, testapp, configstamp) for ctr images import.

$(IMAGES_BUILDER): $(call images_srcs,hack/images) $(call images_srcs,hack/images/cmd/build-image) $(IMAGES_ROOT)/go.mod $(IMAGES_ROOT)/go.sum
	@mkdir -p $(dir $@)
	cd $(IMAGES_ROOT) && $(GO) build -trimpath -o $@ ./hack/images/cmd/build-image
	@touch $@

# The images are built for the host's architecture (the node runs here). One
# explicit rule each: a pattern rule would need .SECONDEXPANSION for the
# per-image sources, which would change every other included makefile.
$(IMAGES_DIR)/pause.tar: $(IMAGES_BUILDER) $(call images_srcs,test/images/pause) $(IMAGES_ROOT)/go.mod
	$(IMAGES_BUILDER) -preset pause -dir $(IMAGES_ROOT) -o $@

$(IMAGES_DIR)/testapp.tar: $(IMAGES_BUILDER) $(call images_srcs,test/images/testapp) $(IMAGES_ROOT)/go.mod
	$(IMAGES_BUILDER) -preset testapp -dir $(IMAGES_ROOT) -o $@

# configstamp's own image: the Dockerfile's build (hack/images TestDockerfileInStep).
$(IMAGES_DIR)/configstamp.tar: $(IMAGES_BUILDER) $(shell cd $(IMAGES_ROOT) && git ls-files 'cmd/*.go' 'certs/*.go' 'controllers/*.go' 'webhook/*.go' 2>/dev/null) $(IMAGES_ROOT)/go.mod $(IMAGES_ROOT)/go.sum
	$(IMAGES_BUILDER) -preset configstamp -dir $(IMAGES_ROOT) -o $@

clean-node-images: ## Remove bin/images and bin/build-image.
	rm -rf $(IMAGES_DIR) $(IMAGES_BUILDER)
