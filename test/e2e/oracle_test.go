package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// unkeyedForms are the digests of a Secret value {key: value} that configstamp
// computes on its way to a keyed value (the per-key SHA-256, and the content
// digest over the per-key digests as an unkeyed ContentID computed it), in the
// forms they could be written: hex, and prefixes down to 12 hex digits.
func unkeyedForms(key, value string) []string {
	perKey := sha256.Sum256([]byte(value))
	perKeyHex := hex.EncodeToString(perKey[:])
	content := sha256.Sum256(fmt.Appendf(nil, "%d:%s%d:%s", len(key), key, len(perKeyHex), perKeyHex))
	var out []string
	for _, full := range []string{perKeyHex, hex.EncodeToString(content[:])} {
		for n := 12; n <= len(full); n += 2 {
			out = append(out, full[:n])
		}
	}
	return out
}

// A user bound to the built-in view ClusterRole reads Deployments and Events,
// not Secrets. After a low-entropy Secret value changed and rolled a
// Deployment, nothing that user can read equals an unkeyed digest of the old
// or the new value: no dictionary attack without the installation key.
func TestNoOracleForViewers(t *testing.T) {
	ns := env.Namespace(t, "oracle", nil)
	spec := framework.PodSpec()
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, framework.Secret(ns, "db", map[string]string{"password": "hunter2"}), dep)
	waitDeploymentRolledOut(t, dep)
	before := framework.TemplateHash(dep)
	env.Apply(t, framework.Secret(ns, "db", map[string]string{"password": "hunter3"}))
	env.WaitTemplateHash(t, dep, before)
	waitDeploymentRolledOut(t, dep)
	env.WaitEvent(t, dep, "ConfigChanged", "Secret/db")

	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oracle-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "viewer"}}}
	if err := env.Client.Create(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), binding) })
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "viewer"}
	viewer, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := viewer.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "db"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the view role reads the Secret itself (%v): this test assumes it cannot", err)
	}
	var seen strings.Builder
	read := func(list client.ObjectList) {
		err := viewer.List(t.Context(), list, client.InNamespace(ns))
		if _, ok := list.(*eventsv1.EventList); ok && apierrors.IsForbidden(err) {
			// Kubernetes 1.30's view role grants core/v1 Events only, 1.36's
			// events.k8s.io too (make test-compat runs 1.30): the same
			// Events, which the viewer then reads as core/v1 Events.
			t.Logf("the viewer cannot list events.k8s.io Events here (%v); it reads them as core/v1 Events", err)
			return
		}
		if err != nil {
			t.Fatalf("the viewer lists %T: %v", list, err)
		}
		raw, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		seen.Write(raw)
	}
	read(&appsv1.DeploymentList{})
	read(&appsv1.ReplicaSetList{})
	read(&corev1.PodList{})
	read(&eventsv1.EventList{})
	read(&corev1.EventList{})
	text := strings.ToLower(seen.String())
	if !strings.Contains(text, strings.ToLower(rollout.AnnotationCause)) {
		t.Fatalf("the viewer does not see %s: the test would prove nothing", rollout.AnnotationCause)
	}
	checked := 0
	for _, value := range []string{"hunter2", "hunter3"} {
		for _, form := range unkeyedForms("password", value) {
			checked++
			if strings.Contains(text, form) {
				t.Errorf("the viewer reads %q, an unkeyed digest of the Secret value %q", form, value)
			}
		}
	}
	t.Logf("checked %d unkeyed digest forms against %d bytes the view role reads", checked, seen.Len())
}
