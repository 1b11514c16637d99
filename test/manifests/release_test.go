package manifests

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// standardLabels are the recommended labels every shipped object carries
// (the overlays' `labels:`).
var standardLabels = map[string]string{
	"app.kubernetes.io/name":       "configstamp",
	"app.kubernetes.io/part-of":    "configstamp",
	"app.kubernetes.io/managed-by": "kustomize",
}

// componentOf is app.kubernetes.io/component per kind, where one fits.
var componentOf = map[string]string{
	"ServiceAccount": "rbac", "ClusterRole": "rbac", "ClusterRoleBinding": "rbac", "Role": "rbac", "RoleBinding": "rbac",
	"Deployment": "manager", "PodDisruptionBudget": "manager",
	"MutatingWebhookConfiguration": "webhook",
	"Issuer":                       "certificate", "Certificate": "certificate",
	"ServiceMonitor": "metrics",
}

// releaseImage is a registry image with a port, a path and a tag: every part
// the installer must carry over.
const releaseImage = "registry.example:5000/platform/configstamp:v1.2.3"

// installableOverlays are every overlay a user applies: the three shipped
// ones, and config/default and config/selfsigned with each opt-in resource
// directory uncommented and with the monitoring component.
func installableOverlays(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{namespacedDir: namespacedDir}
	for _, tc := range overlays {
		out[tc.dir] = tc.dir
		for _, c := range []string{"prometheus", "network-policy"} {
			out[tc.dir+"+"+c] = enableComponent(t, tc.dir, c)
		}
		out[tc.dir+"+components/monitoring"] = componentDir(t, "../components/monitoring", tc.dir)
	}
	return out
}

// TestStandardLabels: every object of every overlay (opt-in components
// included) carries the standard labels, and the component label where one
// fits; selectors and pod template labels stay as they were, so an upgrade
// never changes the Deployment's immutable selector.
func TestStandardLabels(t *testing.T) {
	for name, dir := range installableOverlays(t) {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, dir)
			for _, o := range r.objs {
				l := o.GetLabels()
				for k, v := range standardLabels {
					if l[k] != v {
						t.Errorf("%s %s/%s: label %s=%q, want %q", o.GetKind(), o.GetNamespace(), o.GetName(), k, l[k], v)
					}
				}
				if want, ok := componentOf[o.GetKind()]; ok && l["app.kubernetes.io/component"] != want {
					t.Errorf("%s %s/%s: app.kubernetes.io/component=%q, want %q", o.GetKind(), o.GetNamespace(), o.GetName(), l["app.kubernetes.io/component"], want)
				}
			}
			dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
			managerPods := map[string]string{"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/component": "manager"}
			if !maps.Equal(dep.Spec.Selector.MatchLabels, managerPods) || len(dep.Spec.Selector.MatchExpressions) > 0 {
				t.Errorf("Deployment selector %v, want exactly %v (immutable: it must not change)", dep.Spec.Selector, managerPods)
			}
			if !maps.Equal(dep.Spec.Template.Labels, managerPods) {
				t.Errorf("pod template labels %v, want exactly %v", dep.Spec.Template.Labels, managerPods)
			}
			for _, o := range r.all("Service") {
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector")
				if !maps.Equal(sel, managerPods) {
					t.Errorf("Service %s selector %v, want exactly %v", o.GetName(), sel, managerPods)
				}
			}
		})
	}
}

// renderInstaller runs hack/build-installer.sh, what `make build-installer`
// and `make deploy` run, into a temporary file.
func renderInstaller(t *testing.T, img, overlay string) *rendered {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dist", "install.yaml")
	run(t, repoRoot(t), time.Minute, filepath.Join(repoRoot(t), "hack", "build-installer.sh"), img, overlay, out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return &rendered{raw: data, objs: decodeAll(t, data)}
}

// TestBuildInstaller: dist/install.yaml is the overlay exactly, but the
// manager's image, which is IMG (tag, digest or neither).
func TestBuildInstaller(t *testing.T) {
	for name, tc := range map[string]struct{ img, overlay, image string }{
		"default with a tag":       {releaseImage, "config/default", releaseImage},
		"the release's, by digest": {publishedName + "@sha256:" + strings.Repeat("cd", 32), "config/default", publishedName + "@sha256:" + strings.Repeat("cd", 32)},
		"selfsigned by digest":     {"registry.example/configstamp@sha256:" + strings.Repeat("ab", 32), "config/selfsigned", "registry.example/configstamp@sha256:" + strings.Repeat("ab", 32)},
		"namespaced without tag":   {"registry.example/configstamp", namespacedDir, "registry.example/configstamp:latest"},
	} {
		t.Run(name, func(t *testing.T) {
			got := renderInstaller(t, tc.img, tc.overlay)
			want := kustomize(t, tc.overlay)
			if len(got.objs) != len(want.objs) {
				t.Fatalf("%d objects, want the %d of %s", len(got.objs), len(want.objs), tc.overlay)
			}
			for i, o := range got.objs {
				w := want.objs[i].DeepCopy()
				if w.GetKind() == "Deployment" && w.GetName() == deployment {
					c := getAs[appsv1.Deployment](t, got, "Deployment", deployment).Spec.Template.Spec.Containers[0]
					if c.Image != tc.image {
						t.Errorf("manager image %q, want %q", c.Image, tc.image)
					}
					containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
					containers[0].(map[string]any)["image"] = tc.image
					if err := unstructured.SetNestedSlice(w.Object, containers, "spec", "template", "spec", "containers"); err != nil {
						t.Fatal(err)
					}
				}
				if !equality.Semantic.DeepEqual(o.Object, w.Object) {
					t.Errorf("%s %s differs from %s's render beyond the image", o.GetKind(), o.GetName(), tc.overlay)
				}
			}
		})
	}
	// INSTALL_VERSION (make release-installers: the release's tag) labels
	// every object app.kubernetes.io/version, where `kubectl configstamp
	// version` reads the version of an image pinned by digest; selectors and
	// pod templates stay as they are.
	t.Run("INSTALL_VERSION", func(t *testing.T) {
		t.Setenv("INSTALL_VERSION", "v1.2.3")
		got := renderInstaller(t, publishedName+"@sha256:"+strings.Repeat("cd", 32), "config/selfsigned")
		want := kustomize(t, "config/selfsigned")
		if len(got.objs) != len(want.objs) {
			t.Fatalf("%d objects, want the %d of config/selfsigned", len(got.objs), len(want.objs))
		}
		for i, o := range got.objs {
			if v := o.GetLabels()["app.kubernetes.io/version"]; v != "v1.2.3" {
				t.Errorf("%s %s: app.kubernetes.io/version=%q, want v1.2.3", o.GetKind(), o.GetName(), v)
			}
			if want.objs[i].GetLabels()["app.kubernetes.io/version"] != "" {
				t.Errorf("%s %s: config/selfsigned sets a version label", o.GetKind(), o.GetName())
			}
		}
		dep := getAs[appsv1.Deployment](t, got, "Deployment", deployment)
		base := getAs[appsv1.Deployment](t, want, "Deployment", deployment)
		if !maps.Equal(dep.Spec.Template.Labels, base.Spec.Template.Labels) || !equality.Semantic.DeepEqual(dep.Spec.Selector, base.Spec.Selector) {
			t.Errorf("the pod template's labels or the selector changed: %v %v", dep.Spec.Template.Labels, dep.Spec.Selector)
		}
		t.Setenv("INSTALL_VERSION", "not a label value")
		if _, err := tryRun(t, repoRoot(t), time.Minute, filepath.Join(repoRoot(t), "hack", "build-installer.sh"), releaseImage, "config/default", "-"); err == nil {
			t.Error("build-installer.sh accepted INSTALL_VERSION='not a label value'")
		}
	})
	t.Run("unknown overlay", func(t *testing.T) {
		if _, err := tryRun(t, repoRoot(t), time.Minute, filepath.Join(repoRoot(t), "hack", "build-installer.sh"), releaseImage, "config/nope", "-"); err == nil {
			t.Error("build-installer.sh config/nope succeeded")
		}
	})
}

// TestReleaseTargets checks what the release targets would run (make -n: no
// Docker engine here): the one IMG everywhere, the version stamped into the
// binary and the image, PLATFORMS passed to buildx.
func TestReleaseTargets(t *testing.T) {
	root := repoRoot(t)
	makeN := func(t *testing.T, args ...string) string {
		t.Helper()
		return string(run(t, root, time.Minute, "make", append([]string{"-n", "IMG=" + releaseImage, "VERSION=v1.2.3", "REVISION=abc123"}, args...)...))
	}
	for target, wants := range map[string][]string{
		"docker-build":    {"docker build", "--build-arg VERSION=v1.2.3", "--build-arg REVISION=abc123", "-t " + releaseImage + " ."},
		"docker-push":     {"docker push " + releaseImage},
		"docker-buildx":   {"buildx build", "--push", "--platform=linux/arm64,linux/amd64", "--tag " + releaseImage, "--build-arg VERSION=v1.2.3", "FROM --platform=$BUILDPLATFORM"},
		"build-installer": {`hack/build-installer.sh "` + releaseImage + `" "config/default" dist/install.yaml`},
		"deploy":          {`hack/build-installer.sh "` + releaseImage + `" "config/default" | kubectl apply -f -`},
		"undeploy":        {`hack/build-installer.sh "` + releaseImage + `" "config/default" | kubectl delete --ignore-not-found=false -f -`},
		"build":           {"-ldflags \"-X main.version=v1.2.3 -X main.revision=abc123\"", "./cmd"},
	} {
		t.Run(target, func(t *testing.T) {
			args := []string{target}
			if target == "build" {
				// -B: print the recipe even when bin/configstamp is up to date.
				args = []string{"-B", "LOCALBIN=" + t.TempDir(), target}
			}
			out := makeN(t, args...)
			for _, w := range wants {
				if !strings.Contains(out, w) {
					t.Errorf("make -n %s:\n%s\nlacks %q", target, out, w)
				}
			}
		})
	}
	// The default image is the one config/manager names, so `make deploy`
	// without IMG installs what `kubectl apply -k config/default` would.
	out := string(run(t, root, time.Minute, "make", "-n", "build-installer"))
	if !strings.Contains(out, `"`+managerImage+`"`) {
		t.Errorf("make -n build-installer without IMG:\n%s\nwant the default image %s", out, managerImage)
	}
	// The buildx Dockerfile: only the builder stage moves to the build
	// platform; the runtime stage stays per target platform.
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(dockerfile), "\nFROM "); n != 2 || !slices.Contains(strings.Split(string(dockerfile), "\n"), "FROM golang:1.26 AS builder") {
		t.Errorf("Dockerfile: %d FROM lines; docker-buildx rewrites the first, the builder (FROM golang:1.26 AS builder)", n)
	}
}
