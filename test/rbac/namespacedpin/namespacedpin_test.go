// Package namespacedpin runs pinned config under exactly the identity
// config/namespaced installs with the component components/pin-namespaced:
// the grants to make snapshots come from the Role in each watched namespace,
// none from a ClusterRole. configstamp pins a workload and re-pins it on a
// change with nothing refused, and the audit log shows its only writes to
// ConfigMaps and Secrets are the snapshots' creates.
package namespacedpin

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/test/framework"
)

const serviceAccount = "configstamp-controller-manager"

// watched are the namespaces config/namespaced ships (namespaces/example-*).
var watched = []string{"example-a", "example-b"}

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		AuditLog: true,
		Prepare: func(ctx context.Context, e *framework.Env) (string, error) {
			for _, ns := range watched {
				if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
					return "", err
				}
			}
			return e.InstallWithComponents(ctx, "config/namespaced", serviceAccount, "../components/pin-namespaced")
		},
		Args: []string{
			"--webhook-config-name=configstamp-mutating-webhook-configuration", "--tls-secret=configstamp-webhook-tls",
			"--watch-namespaces=" + strings.Join(watched, ","), "--pin",
			"--max-concurrent-rollouts=0", "--halt-on-failure=false", "--debounce=0",
		},
	}))
}

// TestPinsUnderNamespacedRBAC: a pinned Deployment in a watched namespace
// starts on a snapshot and moves to a new one on a change, with nothing
// configstamp asked for refused; configstamp's writes to ConfigMaps and
// Secrets are the two snapshots' creates and owner patches, in that namespace.
func TestPinsUnderNamespacedRBAC(t *testing.T) {
	ns := watched[0]
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "1"}, nil))
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	d := framework.Deployment(ns, "app", framework.OptIn, spec)
	d.Annotations = map[string]string{pin.AnnotationPin: "true"}
	env.Apply(t, d)
	env.Get(t, d)
	snapshot := regexp.MustCompile(`^cfg-[0-9a-f]{10}$`)
	first := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name
	if !snapshot.MatchString(first) {
		t.Fatalf("the pinned Deployment mounts %q, want a snapshot of cfg", first)
	}
	h1 := framework.TemplateHash(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil))
	env.WaitTemplateHash(t, d, h1)
	if second := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name; second == first || !snapshot.MatchString(second) {
		t.Fatalf("after the change the Deployment mounts %q (was %q), want a new snapshot", second, first)
	}
	env.Configstamp.AssertNoneRefused(t, "the namespaced RBAC with pinning")

	user := "system:serviceaccount:" + framework.OwnNamespace + ":" + serviceAccount
	var writes []string
	creates := 0
	for _, ev := range env.AuditEvents(t) {
		if ev.User.Username != user || !ev.Write() || ev.Stage != "ResponseComplete" ||
			(ev.ObjectRef.Resource != "configmaps" && ev.ObjectRef.Resource != "secrets") || ev.ObjectRef.Namespace == framework.OwnNamespace {
			continue
		}
		if ev.Verb == "create" && ev.ObjectRef.Namespace == ns && ev.ResponseStatus.Code == 201 {
			creates++
			continue
		}
		if ev.Verb == "patch" && ev.ObjectRef.Namespace == ns && snapshot.MatchString(ev.ObjectRef.Name) {
			continue // an owner given to the first snapshot (no revision here to take it over)
		}
		writes = append(writes, fmt.Sprintf("%s %s %s/%s (%d)", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.ResponseStatus.Code))
	}
	if creates != 2 || len(writes) > 0 {
		t.Errorf("configstamp's writes to ConfigMaps and Secrets outside its namespace: %d creates in %s (want 2, the snapshots), and %v (want none but owner patches of snapshots)", creates, ns, writes)
	}
}
