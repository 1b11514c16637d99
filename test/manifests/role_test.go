package manifests

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRoleUpToDate regenerates config/rbac/role.yaml from the RBAC markers
// (kubebuilder:rbac) into a temporary directory and compares.
func TestRoleUpToDate(t *testing.T) {
	root := repoRoot(t)
	gen := filepath.Join(binDir(t), "controller-gen")
	if _, err := os.Stat(gen); err != nil {
		t.Fatalf("%s is missing: run `make controller-gen` (or `make manifests`)", gen)
	}

	mk, err := os.ReadFile(filepath.Join(root, "hack", "manifests.mk"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONTROLLER_TOOLS_VERSION\s*:?=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("hack/manifests.mk sets no CONTROLLER_TOOLS_VERSION")
	}
	version := strings.TrimSpace(string(run(t, root, time.Minute, gen, "--version")))
	if want := "Version: " + string(m[1]); version != want {
		t.Fatalf("%s reports %q, hack/manifests.mk wants %q: run `make controller-gen`", gen, version, want)
	}

	out := t.TempDir()
	// The same generator options as `make manifests`, another output directory.
	run(t, root, 5*time.Minute, gen, "rbac:roleName=manager-role", "paths=./...", "output:rbac:artifacts:config="+out)
	want, err := os.ReadFile(filepath.Join(out, "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatalf("config/rbac/role.yaml: %v: run `make manifests`", err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("config/rbac/role.yaml is stale: run `make manifests`.\n--- committed\n%s\n--- from the markers\n%s", have, want)
	}
}
