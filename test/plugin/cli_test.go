package plugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/test/framework"
)

// pluginVersion is the version TestMain builds the plugin with, as
// hack/release.mk does (-X main.version).
const pluginVersion = "v0.0.0-plugin-test"

// kubectl's flag forms and connection flags reach the cluster: -oyaml,
// -o=json, -n=x, --namespace x, --request-timeout, --as and --as-group,
// --context, --server.
func TestKubectlFlags(t *testing.T) {
	ns := namespace(t, "plugin-flags")
	human := ok(t, "status", "-n", ns)
	for _, args := range [][]string{{"status", "-n=" + ns}, {"status", "--namespace", ns}, {"--namespace=" + ns, "status"},
		{"-n" + ns, "status", "--request-timeout=30s"}} {
		if out := ok(t, args...); out != human {
			t.Errorf("%q:\n%s\nwant the same as -n %s:\n%s", args, out, ns, human)
		}
	}
	var fromJSON, fromYAML map[string]any
	jsonOf(t, ok(t, "status", "-o=json", "-n", ns), &fromJSON)
	if err := yaml.Unmarshal([]byte(ok(t, "status", "-oyaml", "-n", ns)), &fromYAML); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []map[string]any{fromJSON, fromYAML} {
		if doc["budgetInUse"] == nil || doc["rolling"] == nil || doc["halted"] == nil || doc["rolledBack"] == nil {
			t.Errorf("status document %v lacks budgetInUse, rolling, halted or rolledBack", doc)
		}
	}

	// --as: the plugin acts as that user, and --as-group gives it the
	// group's rights.
	if _, errOut, code := run(t, "status", "-n", ns, "--as=plugin-nobody"); code != 1 ||
		!strings.Contains(errOut, `User "plugin-nobody" cannot list resource "deployments"`) {
		t.Errorf("--as=plugin-nobody: exit %d, %q; want 1 and forbidden", code, errOut)
	}
	if out := ok(t, "status", "-n", ns, "--as", "plugin-nobody", "--as-group=system:masters"); out != human {
		t.Errorf("--as-group=system:masters:\n%s", out)
	}
	if _, errOut, code := run(t, "status", "--context=no-such-context"); code != 1 || !strings.Contains(errOut, "no-such-context") {
		t.Errorf("--context=no-such-context: exit %d, %q; want 1", code, errOut)
	}
	if _, errOut, code := run(t, "status", "-n", ns, "--server=https://127.0.0.1:1", "--request-timeout=5s"); code != 1 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("--server to a closed port: exit %d, %q; want 1", code, errOut)
	}
	if _, errOut, code := run(t, "status", "-oxml"); code != 2 || !strings.Contains(errOut, `unknown output format "xml": use json, yaml or wide`) {
		t.Errorf("-oxml: exit %d, %q; want 2", code, errOut)
	}
}

// Completion proposes the cluster's namespaces, ConfigMaps and workloads,
// through kubectl's plugin completion too (kubectl_complete-configstamp on
// PATH, here a symlink to the plugin).
func TestCompletion(t *testing.T) {
	ns := namespace(t, "plugin-complete")
	env.Apply(t, framework.ConfigMap(ns, "complete-me", map[string]string{"a": "1"}, nil),
		framework.Deployment(ns, "web", nil, framework.PodSpec()))
	lines := func(out string) []string { return strings.Split(strings.TrimSpace(out), "\n") }
	contains := func(what string, got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains("\n"+strings.Join(got, "\n")+"\n", "\n"+w+"\n") {
				t.Errorf("%s: %q lacks %q", what, got, w)
			}
		}
	}
	contains("-n", lines(ok(t, "__complete", "status", "-n", "plugin-comp")), ns, ":4")
	contains("who-uses", lines(ok(t, "__complete", "who-uses", "-n", ns, "configmap/")), "configmap/complete-me")
	contains("why", lines(ok(t, "__complete", "why", "-n", ns, "deploy")), "deployment/")
	contains("why deployment/", lines(ok(t, "__complete", "-n", ns, "why", "deployment/w")), "deployment/web")
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := ok(t, "completion", shell); !strings.Contains(out, "completion") || !strings.Contains(out, "kubectl-configstamp") {
			t.Errorf("completion %s:\n%s", shell, out)
		}
	}

	dir := filepath.Dir(plugin)
	link := filepath.Join(dir, "kubectl_complete-configstamp")
	if err := os.Symlink(plugin, link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	cmd := exec.Command("kubectl", "__complete", "configstamp", "--kubeconfig", env.Kubeconfig, "who-uses", "-n", ns, "cm/")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl __complete configstamp: %v", err)
	}
	contains("kubectl __complete configstamp", lines(string(out)), "cm/complete-me")
}

// version: the plugin's version (-X main.version) and configstamp's, read
// from the manager Deployment; "unknown" and why when it is absent or the
// user may not read it.
func TestVersion(t *testing.T) {
	out := ok(t, "version")
	for _, want := range []string{
		"Plugin version:       " + pluginVersion + " (go",
		`configstamp version:  unknown (cannot read it: deployments.apps "configstamp-controller-manager" not found)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^Kubernetes version:   v1\.\d+\.\d+`).MatchString(out) {
		t.Errorf("no Kubernetes version in\n%s", out)
	}
	if out := ok(t, "version", "--client"); strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "Plugin version:  "+pluginVersion) {
		t.Errorf("version --client:\n%s", out)
	}

	// The manager as config/default installs it (no replicas: only its
	// Deployment is read).
	manager := framework.Deployment(framework.OwnNamespace, "configstamp-controller-manager", nil, corev1.PodSpec{
		Containers: []corev1.Container{{Name: "manager", Image: "ghcr.io/configstamp/configstamp:v0.1.0"}}})
	manager.Spec.Replicas = ptr.To[int32](0)
	env.Apply(t, manager)
	// t.Context is canceled before Cleanup functions run.
	cleanup := func(obj client.Object) {
		t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), obj) })
	}
	cleanup(manager)
	var res struct {
		Client struct{ Version, GoVersion, Platform string }
		Server *struct {
			Version, Source, Namespace, Deployment, Image, Error string
		}
		KubernetesVersion string
	}
	jsonOf(t, ok(t, "version", "-o", "json"), &res)
	if res.Client.Version != pluginVersion || res.Client.GoVersion == "" || res.Client.Platform == "" || res.Server == nil ||
		res.Server.Version != "v0.1.0" || res.Server.Source != "image tag" || res.Server.Namespace != framework.OwnNamespace ||
		res.Server.Deployment != "configstamp-controller-manager" || res.Server.Image != "ghcr.io/configstamp/configstamp:v0.1.0" ||
		res.Server.Error != "" || !strings.HasPrefix(res.KubernetesVersion, "v1.") {
		t.Errorf("version -o json: %+v %+v", res, res.Server)
	}

	// A user who may read Deployments in one namespace only (the view role
	// bound there) sees "unknown" and why; bound cluster-wide, the version.
	viewer := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plugin-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "plugin-viewer"}}}
	if err := env.Client.Create(t.Context(), viewer); err != nil {
		t.Fatal(err)
	}
	cleanup(viewer)
	out = ok(t, "version", "--as=plugin-viewer")
	if !strings.Contains(out, `configstamp version:  unknown (cannot read it: deployments.apps "configstamp-controller-manager" is forbidden: User "plugin-viewer" cannot get resource "deployments"`) {
		t.Errorf("version as a viewer of default only:\n%s", out)
	}
	clusterViewer := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plugin-viewer"},
		RoleRef: viewer.RoleRef, Subjects: viewer.Subjects}
	if err := env.Client.Create(t.Context(), clusterViewer); err != nil {
		t.Fatal(err)
	}
	cleanup(clusterViewer)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		out = ok(t, "version", "--as=plugin-viewer")
		return strings.Contains(out, "configstamp version:  v0.1.0 (from the image tag of deployment configstamp-system/configstamp-controller-manager, image ghcr.io/configstamp/configstamp:v0.1.0)"),
			"version as a cluster-wide viewer:\n" + out
	})

	// The label app.kubernetes.io/version wins over the image's tag.
	env.Get(t, manager)
	manager.Labels = map[string]string{"app.kubernetes.io/version": "v0.2.0-rc.1"}
	if err := env.Client.Update(t.Context(), manager); err != nil {
		t.Fatal(err)
	}
	jsonOf(t, ok(t, "version", "-ojson"), &res)
	if res.Server == nil || res.Server.Version != "v0.2.0-rc.1" || res.Server.Source != "label app.kubernetes.io/version" {
		t.Errorf("version with the label: %+v", res.Server)
	}
	var raw map[string]any
	jsonOf(t, ok(t, "version", "--client", "-o=json"), &raw)
	if _, ok := raw["server"]; ok {
		t.Errorf("version --client -o json has a server: %v", raw)
	}
}
