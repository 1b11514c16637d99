//go:build tools

// Package tools pins krew for the release check: validate-krew-manifest (krew's
// own manifest validation) and krew itself (installs the plugin from the built
// archives, offline). Built by `make krew-validate` (hack/release.mk).
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
