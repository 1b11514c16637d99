package manifests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/localcp"
)

// TestServerSideDryRun applies both overlays with a server-side dry run to a
// real kube-apiserver that has cert-manager's CRDs: every object must pass the
// API server's validation (schemas, CRD schemas, RBAC escalation checks). The
// opt-in NetworkPolicies of config/network-policy too (config/prometheus needs
// the Prometheus Operator's CRDs and is checked by TestPrometheus only). And
// dist/install.yaml as `make build-installer` renders it.
func TestServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	root := repoRoot(t)
	cp, err := localcp.Start(t.Context(), localcp.Options{BinDir: binDir(t), Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		if errors.Is(err, localcp.ErrBinariesMissing) {
			t.Fatalf("%v (bin/etcd and bin/kube-apiserver)", err)
		}
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	kubectl := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := tryRun(t, root, 2*time.Minute, "kubectl", append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
		if err != nil {
			t.Fatalf("%v\n--- kube-apiserver log\n%s", err, cp.Tail("kube-apiserver", 20))
		}
		return string(out)
	}

	// cert-manager's CRDs, as shipped in the module this repository requires.
	cmDir := strings.TrimSpace(string(run(t, root, time.Minute, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")))
	crds := filepath.Join(cmDir, "deploy", "crds")
	if _, err := os.Stat(crds); err != nil {
		t.Fatalf("cert-manager CRDs: %v", err)
	}
	kubectl(t, "apply", "--server-side", "--field-manager=configstamp-test", "-f", crds)
	if err := cp.WaitServed(t.Context(), "cert-manager.io/v1", "certificates", "issuers"); err != nil {
		t.Fatal(err)
	}

	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, tc.dir)
			dir := t.TempDir()
			all := filepath.Join(dir, "all.yaml")
			if err := os.WriteFile(all, r.raw, 0o644); err != nil {
				t.Fatal(err)
			}
			// A dry run does not create the namespace, and the namespaced
			// objects' dry runs need it: create it for real first. The same for
			// the ServiceAccount, which the pod check below needs.
			var prereqs []string
			for _, kind := range []string{"Namespace", "ServiceAccount"} {
				objs := r.all(kind)
				if len(objs) != 1 {
					t.Fatalf("%d %s objects, want 1", len(objs), kind)
				}
				data, err := objs[0].MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				f := filepath.Join(dir, kind+".json")
				if err := os.WriteFile(f, data, 0o644); err != nil {
					t.Fatal(err)
				}
				prereqs = append(prereqs, "-f", f)
			}
			kubectl(t, append([]string{"apply", "--server-side", "--field-manager=configstamp-test"}, prereqs...)...)

			// --warnings-as-errors: a deprecated API or a template that the
			// namespace's Pod Security warn level objects to fails the test.
			out := kubectl(t, "apply", "--server-side", "--dry-run=server", "--warnings-as-errors", "--field-manager=configstamp-test", "-f", all)
			t.Logf("kubectl apply --server-side --dry-run=server -k %s:\n%s", tc.dir, out)
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasSuffix(line, "(server dry run)") {
					n++
				}
			}
			if n != len(r.objs) {
				t.Errorf("%d of %d objects applied (server dry run)", n, len(r.objs))
			}

			// The namespace enforces the restricted Pod Security Standard on pods:
			// a pod made from the Deployment's template must be admitted.
			dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
			pod := &corev1.Pod{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: "pod-security-check", Namespace: ownNamespace, Labels: dep.Spec.Template.Labels},
				Spec:       dep.Spec.Template.Spec,
			}
			podFile := filepath.Join(dir, "pod.json")
			data, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(podFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			kubectl(t, "apply", "--server-side", "--dry-run=server", "--warnings-as-errors", "--field-manager=configstamp-test", "-f", podFile)

			// The opt-in NetworkPolicies (config/network-policy), as the
			// overlay renders them once enabled.
			withNP := kustomize(t, enableComponent(t, tc.dir, "network-policy"))
			var items []map[string]any
			for _, o := range withNP.all("NetworkPolicy") {
				items = append(items, o.Object)
			}
			if len(items) == 0 {
				t.Fatal("config/network-policy renders no NetworkPolicy")
			}
			data, err = json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
			if err != nil {
				t.Fatal(err)
			}
			npFile := filepath.Join(dir, "networkpolicies.json")
			if err := os.WriteFile(npFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out = kubectl(t, "apply", "--server-side", "--dry-run=server", "--warnings-as-errors", "--field-manager=configstamp-test", "-f", npFile)
			if got := strings.Count(out, "(server dry run)"); got != len(items) {
				t.Errorf("%d of %d NetworkPolicies applied (server dry run):\n%s", got, len(items), out)
			}
		})
	}

	// dist/install.yaml as `make build-installer IMG=...` writes it (the same
	// script), applied as a user would: kubectl apply -f dist/install.yaml.
	t.Run("dist/install.yaml", func(t *testing.T) {
		r := renderInstaller(t, releaseImage, "config/default")
		install := filepath.Join(t.TempDir(), "install.yaml")
		if err := os.WriteFile(install, r.raw, 0o644); err != nil {
			t.Fatal(err)
		}
		// The namespace exists for real first (a dry run creates nothing, and
		// the namespaced objects' dry runs need it).
		ns, err := r.get(t, "Namespace", ownNamespace).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		nsFile := filepath.Join(t.TempDir(), "namespace.json")
		if err := os.WriteFile(nsFile, ns, 0o644); err != nil {
			t.Fatal(err)
		}
		kubectl(t, "apply", "--server-side", "--field-manager=configstamp-test", "-f", nsFile)
		out := kubectl(t, "apply", "--server-side", "--dry-run=server", "--warnings-as-errors", "--field-manager=configstamp-test", "-f", install)
		if n := strings.Count(out, "(server dry run)"); n != len(r.objs) || n == 0 {
			t.Errorf("%d of %d objects of dist/install.yaml applied (server dry run):\n%s", n, len(r.objs), out)
		}
	})
}
