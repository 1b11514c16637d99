package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The release's rule file: config/prometheus/rules.yaml's groups, every
// runbook_url at the tag; the check refuses one at main.
func TestRules(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "runbook_url: "+RunbookBase) {
		t.Fatalf("config/prometheus/rules.yaml has no runbook_url under %s", RunbookBase)
	}
	got, err := Rules(src, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "groups:\n") || strings.Contains(string(got), "/blob/main/") ||
		strings.Count(string(got), "runbook_url: https://github.com/configstamp/configstamp/blob/v1.2.3/docs/operations.md#") !=
			strings.Count(string(src), "runbook_url: ") {
		t.Errorf("the rule file:\n%s", got)
	}
	if err := CheckRules(got, "v1.2.4"); err == nil || !strings.Contains(err.Error(), "blob/v1.2.4/docs/") {
		t.Errorf("CheckRules at another tag: %v", err)
	}
	// The rule file as the release wrote it before: runbooks at main.
	atMain := strings.ReplaceAll(string(got), "/blob/v1.2.3/", "/blob/main/")
	if err := CheckRules([]byte(atMain), "v1.2.3"); err == nil {
		t.Error("CheckRules passed runbook URLs at main")
	}
	if _, err := Rules([]byte(strings.Replace(string(src), RunbookBase, "https://example.com/", 1)), "v1.2.3"); err == nil {
		t.Error("Rules passed a runbook_url elsewhere than the docs")
	}
	if err := CheckRules([]byte("groups: []\n"), "v1.2.3"); err == nil {
		t.Error("CheckRules passed a rule file without alerts")
	}
}

const digest = "ghcr.io/configstamp/configstamp@sha256:0123"

// installer is a small installer: the manager's namespace and Deployment,
// and extra.
func installer(version, image, extra string) []byte {
	return []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: configstamp-system
  labels: {app.kubernetes.io/version: ` + version + `}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: configstamp-controller-manager
  namespace: configstamp-system
  labels: {app.kubernetes.io/version: ` + version + `}
spec:
  template:
    spec:
      containers:
        - name: manager
          image: ` + image + `
          args: [--leader-elect]
` + extra)
}

func TestCheckInstaller(t *testing.T) {
	if err := CheckInstaller(installer("v1.2.3", digest, ""), "v1.2.3", digest); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data  []byte
		image string
		want  string
	}{
		"no version label": {installer("", digest, ""), digest, `label app.kubernetes.io/version="", want "v1.2.3"`},
		"another image":    {installer("v1.2.3", "ghcr.io/configstamp/configstamp:v1.2.3", ""), digest, "the manager's image is"},
		"by tag":           {installer("v1.2.3", "x:v1.2.3", ""), "x:v1.2.3", "not pinned by digest"},
		"example namespace": {installer("v1.2.3", digest, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: configstamp-manager-role
  namespace: example-a
  labels: {app.kubernetes.io/version: v1.2.3}
`), digest, "Role example-a/configstamp-manager-role: in namespace example-a"},
		"watch-namespaces": {[]byte(strings.Replace(string(installer("v1.2.3", digest, "")), "[--leader-elect]", "[--watch-namespaces=example-a]", 1)),
			digest, "--watch-namespaces=example-a"},
		"no manager": {[]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: configstamp-system}\n"), digest, "no Deployment"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckInstaller(tc.data, "v1.2.3", tc.image)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
