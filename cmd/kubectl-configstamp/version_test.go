package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// A release install names the image by digest, which says no version: the
// release's installers (make release-installers, what the release workflow
// runs with the tag as VERSION) label the manager Deployment with it, and
// `kubectl configstamp version` shows it.
func TestVersionOfAReleaseInstall(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl (its kustomize renders the installers) is not on PATH")
	}
	const img = "ghcr.io/configstamp/configstamp@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-s", "release-installers",
		"IMG="+img, "VERSION=v1.2.3", "RELEASE_FILES="+dir)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "INSTALL_VERSION=") // the release's, not the caller's
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release-installers: %v\n%s", err, out)
	}
	for _, file := range []string{"install.yaml", "install-selfsigned.yaml"} {
		t.Run(file, func(t *testing.T) {
			d := installedManager(t, filepath.Join(dir, file))
			if got := managerImage(d); got != img {
				t.Fatalf("the installer runs %s, want %s", got, img)
			}
			o, out := fakeCluster(t, time.Now(), d)
			o.output = "json"
			if err := runVersion(t.Context(), o, nil); err != nil {
				t.Fatal(err)
			}
			var res versionResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if res.Server == nil || res.Server.Version != "v1.2.3" || res.Server.Source != "label "+labelVersion {
				t.Errorf("kubectl configstamp version on a release install of v1.2.3:\n%s", out)
			}
		})
	}
}

// installedManager is the manager Deployment of an installer.
func installedManager(t *testing.T, file string) *appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" && d.Name == defaultManagerDeployment && d.Namespace == defaultManagerNamespace {
			return &d
		}
	}
	t.Fatal(file + ": no manager Deployment")
	return nil
}
