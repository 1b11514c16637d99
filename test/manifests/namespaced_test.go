package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/test/localcp"
	"github.com/configstamp/configstamp/webhook"
)

const namespacedDir = "config/namespaced"

// grants flattens rules to "group/resource verb" strings (resourceNames kept).
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+"/"+res+" "+v+" "+strings.Join(r.ResourceNames, ","))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNamespacedOverlay: config/namespaced grants the generated ClusterRole's
// rules (but Namespaces) through a Role in each watched namespace and nowhere
// else; its --watch-namespaces, its Roles and its webhook's namespaceSelector
// name the same namespaces; no ClusterRole reads ConfigMaps or Secrets or
// touches workloads.
func TestNamespacedOverlay(t *testing.T) {
	r := kustomize(t, namespacedDir)
	dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
	args := dep.Spec.Template.Spec.Containers[0].Args
	watchArg, ok := argValue(args, "watch-namespaces")
	if !ok {
		t.Fatal("the namespaced overlay does not pass --watch-namespaces")
	}
	watched := strings.Split(watchArg, ",")
	slices.Sort(watched)

	// The generated ClusterRole's rules but Namespaces (read through the namespace-reader ClusterRole).
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range decodeAll(t, data) {
		if o.GetKind() == "ClusterRole" {
			for _, g := range grants(typed[rbacv1.ClusterRole](t, o).Rules) {
				// Cluster-scoped: Namespaces (read cluster-wide, below) and
				// nodes (not granted: a DaemonSet's rollout waits for every
				// node, docs/rollout-safety.md).
				if !strings.HasPrefix(g, "/namespaces ") && !strings.HasPrefix(g, "/nodes ") {
					want = append(want, g)
				}
			}
		}
	}
	var roleNamespaces []string
	for _, o := range r.all("Role") {
		if o.GetName() != "configstamp-manager-role" || o.GetNamespace() == ownNamespace {
			continue
		}
		roleNamespaces = append(roleNamespaces, o.GetNamespace())
		if got := grants(typed[rbacv1.Role](t, o).Rules); !slices.Equal(got, want) {
			t.Errorf("Role in %s grants\n%v\nwant the ClusterRole's (but namespaces and nodes)\n%v", o.GetNamespace(), got, want)
		}
	}
	slices.Sort(roleNamespaces)
	if !slices.Equal(roleNamespaces, watched) {
		t.Errorf("Roles in %v, --watch-namespaces=%s: list the same namespaces", roleNamespaces, watchArg)
	}
	for _, o := range r.all("RoleBinding") {
		rb := typed[rbacv1.RoleBinding](t, o)
		if rb.Name == "configstamp-manager-rolebinding" && rb.Namespace != ownNamespace {
			if len(rb.Subjects) != 1 || rb.Subjects[0].Name != serviceAccount || rb.Subjects[0].Namespace != ownNamespace {
				t.Errorf("RoleBinding in %s binds %+v, want configstamp's ServiceAccount in %s", rb.Namespace, rb.Subjects, ownNamespace)
			}
		}
	}

	// Cluster-wide: Namespaces read, its webhook configuration, /metrics authentication; nothing else.
	allowed := []string{"/namespaces get ", "/namespaces list ", "/namespaces watch ",
		"admissionregistration.k8s.io/mutatingwebhookconfigurations get " + mwcName,
		"admissionregistration.k8s.io/mutatingwebhookconfigurations update " + mwcName,
		"admissionregistration.k8s.io/mutatingwebhookconfigurations patch " + mwcName,
		"authentication.k8s.io/tokenreviews create ", "authorization.k8s.io/subjectaccessreviews create "}
	bound := map[string]bool{}
	for _, o := range r.all("ClusterRoleBinding") {
		crb := typed[rbacv1.ClusterRoleBinding](t, o)
		for _, s := range crb.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == serviceAccount {
				bound[crb.RoleRef.Name] = true
			}
		}
	}
	for _, o := range r.all("ClusterRole") {
		if !bound[o.GetName()] {
			continue // metrics-reader: for scrapers, not configstamp
		}
		for _, g := range grants(typed[rbacv1.ClusterRole](t, o).Rules) {
			if !slices.Contains(allowed, g) {
				t.Errorf("ClusterRole %s bound to configstamp grants %q cluster-wide", o.GetName(), g)
			}
		}
	}

	// The shipped webhook configuration is what configstamp registers from its flags.
	scope, err := workload.NewScope(ownNamespace, watched, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	got := getAs[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", mwcName)
	svc, _ := argValue(args, "webhook-service")
	compareWebhooks(t, got, webhook.ScopedConfiguration(mwcName, scope, serviceConfig(ownNamespace, svc), nil))
}

// TestNamespacedServerSideDryRun applies config/namespaced with a server-side
// dry run (its namespaces exist first, as they must in a cluster).
func TestNamespacedServerSideDryRun(t *testing.T) {
	root := repoRoot(t)
	cp, err := localcp.Start(t.Context(), localcp.Options{BinDir: binDir(t), Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := tryRun(t, root, 2*time.Minute, "kubectl", append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return string(out)
	}
	r := kustomize(t, namespacedDir)
	for _, ns := range []string{ownNamespace, "example-a", "example-b"} {
		kubectl("create", "namespace", ns)
	}
	all := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(all, r.raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := kubectl("apply", "--server-side", "--dry-run=server", "--warnings-as-errors", "--field-manager=configstamp-test", "-f", all)
	if n := strings.Count(out, "(server dry run)"); n != len(r.objs) {
		t.Errorf("%d of %d objects applied (server dry run):\n%s", n, len(r.objs), out)
	}
	t.Logf("kubectl apply --server-side --dry-run=server -k %s: %d objects", namespacedDir, len(r.objs))
}
