package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/controllers/workload/kindstest"
	"github.com/configstamp/configstamp/webhook"
)

const argoDir = "config/kinds/argo-rollouts"

// TestKindsRBACUpToDate: the Argo Rollouts component's rbac.yaml is what
// `configstamp --print-rbac` generates from its kinds.yaml (make kinds-rbac).
func TestKindsRBACUpToDate(t *testing.T) {
	root := repoRoot(t)
	want, err := os.ReadFile(filepath.Join(root, argoDir, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := run(t, root, 5*time.Minute, "go", "run", "./cmd", "--kinds-config="+argoDir+"/kinds.yaml", "--print-rbac")
	if !bytes.Equal(got, want) {
		t.Fatalf("%s/rbac.yaml is not what --print-rbac generates: run `make kinds-rbac`\n--- generated\n%s", argoDir, got)
	}
}

// TestKindsComponent renders config/default with the Argo Rollouts component
// added the way its kustomization says, and checks what it adds: the least
// RBAC (get, list, watch, patch of rollouts, nothing else), bound to
// configstamp's ServiceAccount; --kinds-config naming the mounted kinds.yaml;
// and webhook rules equal to those self mode registers for the kind.
func TestKindsComponent(t *testing.T) {
	r := withComponent(t, "../kinds/argo-rollouts")

	role := getAs[rbacv1.ClusterRole](t, r, "ClusterRole", "configstamp-kinds-role")
	if got, want := grants(role.Rules), []string{"argoproj.io/rollouts get ", "argoproj.io/rollouts list ", "argoproj.io/rollouts patch ", "argoproj.io/rollouts watch "}; !slices.Equal(got, want) {
		t.Errorf("the kinds ClusterRole grants %v, want %v", got, want)
	}
	crb := getAs[rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", "configstamp-kinds-rolebinding")
	if crb.RoleRef.Name != role.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != serviceAccount || crb.Subjects[0].Namespace != ownNamespace {
		t.Errorf("the kinds ClusterRoleBinding binds %s to %+v, want %s to %s/%s", crb.RoleRef.Name, crb.Subjects, role.Name, ownNamespace, serviceAccount)
	}

	dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
	spec := dep.Spec.Template.Spec
	path, ok := argValue(spec.Containers[0].Args, "kinds-config")
	if !ok {
		t.Fatal("no --kinds-config in the manager's args")
	}
	var mount *corev1.VolumeMount
	for i, m := range spec.Containers[0].VolumeMounts {
		if filepath.Join(m.MountPath, "kinds.yaml") == path {
			mount = &spec.Containers[0].VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--kinds-config=%s is not in a mounted volume", path)
	}
	var cmName string
	for _, v := range spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := getAs[corev1.ConfigMap](t, r, "ConfigMap", cmName)
	kinds, err := workload.ParseKindsConfig([]byte(cm.Data["kinds.yaml"]))
	if err != nil || len(kinds) != 1 || kinds[0].Kind != "Rollout" {
		t.Fatalf("the mounted kinds.yaml: %v, %v", kinds, err)
	}

	// cert-manager mode ships the configuration: it must say what self mode registers.
	registry := kindstest.Registry(t, cm.Data["kinds.yaml"])
	got := getAs[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", mwcName)
	compareWebhooks(t, got, webhook.Configuration(mwcName, ownNamespace, serviceConfig(ownNamespace, webhookService), registry))
}

// withComponent renders config/default (or the overlay named) with component
// added the way the components' kustomizations say (in a copy of config/).
func withComponent(t *testing.T, component string, overlay ...string) *rendered {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is needed to render the overlays")
	}
	target := "config/default"
	if len(overlay) > 0 {
		target = overlay[0]
	}
	return kustomize(t, componentDir(t, component, target))
}

// componentDir returns the directory of overlay (config/...) in a copy of
// config/ with component added to its components, as the components'
// kustomizations say.
func componentDir(t *testing.T, component, overlay string) string {
	t.Helper()
	dir := t.TempDir()
	run(t, repoRoot(t), time.Minute, "cp", "-r", "config", dir)
	target := filepath.Join(dir, overlay)
	kust := filepath.Join(target, "kustomization.yaml")
	data, err := os.ReadFile(kust)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kust, append(data, "\ncomponents:\n  - "+component+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	return target
}

// TestPinComponent: the pin component adds --pin and exactly its grants,
// create and patch of ConfigMaps and Secrets and reading ReplicaSets and
// ControllerRevisions, bound to configstamp's ServiceAccount; nothing that
// updates or deletes anything.
func TestPinComponent(t *testing.T) {
	r := withComponent(t, "../components/pin")
	role := getAs[rbacv1.ClusterRole](t, r, "ClusterRole", "configstamp-pin-role")
	if got, want := grants(role.Rules), []string{"/configmaps create ", "/configmaps patch ", "/secrets create ", "/secrets patch ",
		"apps/controllerrevisions get ", "apps/controllerrevisions list ", "apps/controllerrevisions watch ",
		"apps/replicasets get ", "apps/replicasets list ", "apps/replicasets watch "}; !slices.Equal(got, want) {
		t.Errorf("the pin ClusterRole grants %v, want %v", got, want)
	}
	crb := getAs[rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", "configstamp-pin-rolebinding")
	if crb.RoleRef.Name != role.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != serviceAccount || crb.Subjects[0].Namespace != ownNamespace {
		t.Errorf("the pin ClusterRoleBinding binds %s to %+v, want %s to %s/%s", crb.RoleRef.Name, crb.Subjects, role.Name, ownNamespace, serviceAccount)
	}
	dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--pin") {
		t.Errorf("no --pin in the manager's args %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
}

// TestComponentsKeepTheirArgs: a component's argument reaches the manager
// in every overlay a user adds it to, next to the overlay's own: config/
// selfsigned once replaced the whole list of arguments, so --pin and
// --kinds-config were silently dropped there.
func TestComponentsKeepTheirArgs(t *testing.T) {
	for _, c := range []struct{ overlay, component, arg string }{
		{"config/default", "../components/pin", "--pin"},
		{"config/selfsigned", "../components/pin", "--pin"},
		{"config/namespaced", "../components/pin-namespaced", "--pin"},
		{"config/default", "../kinds/argo-rollouts", "--kinds-config="},
		{"config/selfsigned", "../kinds/argo-rollouts", "--kinds-config="},
	} {
		t.Run(c.overlay+" "+c.component, func(t *testing.T) {
			plain := getAs[appsv1.Deployment](t, kustomize(t, filepath.Join(repoRoot(t), c.overlay)), "Deployment", deployment).Spec.Template.Spec.Containers[0].Args
			args := getAs[appsv1.Deployment](t, withComponent(t, c.component, c.overlay), "Deployment", deployment).Spec.Template.Spec.Containers[0].Args
			var added []string
			for _, a := range args {
				if !slices.Contains(plain, a) {
					added = append(added, a)
				}
			}
			if len(added) != 1 || !strings.HasPrefix(added[0], c.arg) || len(args) != len(plain)+1 {
				t.Errorf("%s with %s: args %v, want the overlay's %v and %s", c.overlay, c.component, args, plain, c.arg)
			}
		})
	}
}

// TestPinNamespacedComponent: for the namespaced install, the pin grants go
// into the Role of each watched namespace, not into a ClusterRole nor the
// Role of configstamp's own namespace.
func TestPinNamespacedComponent(t *testing.T) {
	r := withComponent(t, "../components/pin-namespaced", "config/namespaced")
	plain := kustomize(t, filepath.Join(repoRoot(t), "config", "namespaced"))
	added := []string{"/configmaps create ", "/configmaps patch ", "/secrets create ", "/secrets patch ",
		"apps/controllerrevisions get ", "apps/controllerrevisions list ", "apps/controllerrevisions watch ",
		"apps/replicasets get ", "apps/replicasets list ", "apps/replicasets watch "}
	for _, kind := range []string{"Role", "ClusterRole"} {
		for _, o := range r.all(kind) {
			role := typed[rbacv1.ClusterRole](t, o)
			got := grants(role.Rules)
			var before []string
			for _, p := range plain.all(kind) {
				if p.GetName() == o.GetName() && p.GetNamespace() == o.GetNamespace() {
					before = grants(typed[rbacv1.ClusterRole](t, p).Rules)
				}
			}
			want := before
			if kind == "Role" && role.Name == "configstamp-manager-role" && role.Namespace != ownNamespace {
				want = append(slices.Clone(before), added...)
				slices.Sort(want)
				want = slices.Compact(want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %s/%s grants %v, want %v", kind, role.Namespace, role.Name, got, want)
			}
		}
	}
	dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--pin") {
		t.Errorf("no --pin in the manager's args %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
}
