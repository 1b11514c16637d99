// Package pin runs pinned config (configstamp.io/pin) on the full local
// control plane (kube-controller-manager, scheduler, kwok), with configstamp
// under exactly the identity config/selfsigned plus the component
// config/components/pin installs, and manifests applied with kubectl as a user
// would. The audit log shows what configstamp wrote.
package pin

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// key is configstamp's hash key here, so that a test can compute the name a
// snapshot will get.
var key = []byte("pin-suite-key-0123456789abcdef012")

const serviceAccount = "configstamp-controller-manager"

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Plane:    framework.Kwok,
		HashKey:  key,
		AuditLog: true,
		Prepare:  installRBAC,
		// One slot and a short deadline for the halted wave
		// (TestHaltHoldsForPinnedFiles); the other tests roll one workload at a time.
		Args: []string{"--pin", "--debounce=0", "--max-concurrent-rollouts=1", "--progress-deadline=" + progressDeadline.String(),
			"--webhook-config-name=configstamp-mutating-webhook-configuration", "--tls-secret=configstamp-webhook-tls"},
	}))
}

// installRBAC applies config/selfsigned with the pin component added as its
// kustomization says: configstamp runs with only its ServiceAccount's token.
func installRBAC(ctx context.Context, e *framework.Env) (string, error) {
	return e.InstallWithComponents(ctx, "config/selfsigned", serviceAccount, "../components/pin")
}

// snapshotName matches a snapshot of source: its name, "-", 10 hex digits.
func snapshotName(source string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(source) + "-[0-9a-f]{10}$")
}

// app is the workload under test as a user writes it: it mounts the
// ConfigMap cfg as files and reads the Secret db through envFrom; pinned
// unless unpinned.
func app(ns string, unpinned bool) *appsv1.Deployment {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	d := framework.Deployment(ns, "app", framework.OptIn, spec)
	if !unpinned {
		d.Annotations = map[string]string{pin.AnnotationPin: "true"}
	}
	return d
}

// withSources makes a namespace (named from prefix) holding the sources app
// reads: the ConfigMap cfg (key a) and the Secret db.
func withSources(t *testing.T, prefix, a string) string {
	t.Helper()
	ns := env.Namespace(t, prefix, nil)
	applySources(t, ns, a)
	return ns
}

// applySources applies, in ns, the ConfigMap cfg (key a) and the Secret db.
func applySources(t *testing.T, ns, a string) {
	t.Helper()
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": a}, nil), framework.Secret(ns, "db", map[string]string{"password": "s1"}))
}

// refs returns the ConfigMap the template's volume mounts and the Secret its
// container reads.
func refs(d *appsv1.Deployment) (cm, secret string) {
	return d.Spec.Template.Spec.Volumes[0].ConfigMap.Name, d.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name
}

// configMapData reads ConfigMap name's data and whether it is immutable and
// configstamp's snapshot of source.
func configMapData(t *testing.T, ns, name, source string) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatalf("the snapshot %s: %v", name, err)
	}
	if cm.Immutable == nil || !*cm.Immutable || cm.Labels[pin.LabelSnapshot] != "true" || cm.Annotations[pin.SnapshotOf] != source {
		t.Fatalf("ConfigMap %s is not an immutable snapshot of %s: immutable %v, labels %v, annotations %v", name, source, cm.Immutable, cm.Labels, cm.Annotations)
	}
	return cm.Data
}

func waitRolledOut(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		env.Get(t, d)
		return framework.RolledOut(d), fmt.Sprintf("deployment %s: %+v", d.Name, d.Status)
	})
}

// TestPinnedDeployment: a pinned Deployment starts on snapshots (one
// ReplicaSet); a change of the mounted ConfigMap rolls it once onto a new
// snapshot while the old ReplicaSet's snapshot keeps the old data; a re-apply
// of the unchanged manifest, and kubectl diff, see no change; a StatefulSet
// pinning the same ConfigMap shares the snapshot; removing the annotation
// puts the source names back in one rollout; the revisions own the
// snapshots, and deleting the workloads lets Kubernetes' garbage collector
// delete them.
func TestPinnedDeployment(t *testing.T) {
	ns := withSources(t, "pin", "1")
	d := app(ns, false)
	env.Apply(t, d)
	waitRolledOut(t, d)
	cm1, sec1 := refs(d)
	if !snapshotName("cfg").MatchString(cm1) || !snapshotName("db").MatchString(sec1) {
		t.Fatalf("pinned template references ConfigMap %q and Secret %q, want snapshots of cfg and db", cm1, sec1)
	}
	if got := configMapData(t, ns, cm1, "cfg"); got["a"] != "1" {
		t.Fatalf("snapshot %s data = %v, want a=1", cm1, got)
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sec1}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["password"]) != "s1" || sec.Type != corev1.SecretTypeOpaque || sec.Immutable == nil || !*sec.Immutable {
		t.Fatalf("Secret snapshot %s: type %s, immutable %v, password %q", sec1, sec.Type, sec.Immutable, sec.Data["password"])
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 1 {
		t.Fatalf("ReplicaSets after creating a pinned Deployment: %d, want 1", n)
	}

	// A StatefulSet pinning the same ConfigMap at the same content shares the snapshot.
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	sts := framework.StatefulSet(ns, "db-app", framework.OptIn, spec)
	sts.Annotations = map[string]string{pin.AnnotationPin: "true"}
	env.Apply(t, sts)
	env.Get(t, sts)
	if got := sts.Spec.Template.Spec.Volumes[0].ConfigMap.Name; got != cm1 {
		t.Fatalf("StatefulSet pins ConfigMap %q, want the Deployment's snapshot %q", got, cm1)
	}

	// A change of the mounted ConfigMap: one rollout onto a new snapshot.
	h1 := framework.TemplateHash(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil))
	env.WaitTemplateHash(t, d, h1)
	waitRolledOut(t, d)
	cm2, sec2 := refs(d)
	if cm2 == cm1 || !snapshotName("cfg").MatchString(cm2) || sec2 != sec1 {
		t.Fatalf("after the change: ConfigMap %q (was %q), Secret %q (was %q); want a new ConfigMap snapshot and the same Secret one", cm2, cm1, sec2, sec1)
	}
	if got := configMapData(t, ns, cm2, "cfg"); got["a"] != "2" {
		t.Fatalf("new snapshot %s data = %v, want a=2", cm2, got)
	}
	if got := configMapData(t, ns, cm1, "cfg"); got["a"] != "1" {
		t.Fatalf("old snapshot %s data = %v, want a=1 still (the old ReplicaSet's pods mount it)", cm1, got)
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 2 {
		t.Fatalf("ReplicaSets after one change: %d, want 2", n)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, sts)
		got := sts.Spec.Template.Spec.Volumes[0].ConfigMap.Name
		return got == cm2, fmt.Sprintf("StatefulSet pins %q, want %q", got, cm2)
	})

	// Re-applying the unchanged manifest, and kubectl diff, change nothing:
	// not at once, not for as long as any reconcile it wakes could take.
	before := framework.TemplateJSON(t, d)
	env.Apply(t, app(ns, false))
	if out, stderr, err := env.KubectlErr(framework.Manifest(t, app(ns, false)), "diff", "-f", "-"); err != nil {
		t.Fatalf("kubectl diff of the unchanged manifest: %v\n%s%s", err, out, stderr)
	}
	keeps(t, quiet, func() string {
		env.Get(t, d)
		if after := framework.TemplateJSON(t, d); after != before {
			return fmt.Sprintf("re-applying the unchanged manifest changed the template:\nbefore %s\nafter  %s", before, after)
		}
		if n := len(env.ReplicaSets(t, ns, "app")); n != 2 {
			return fmt.Sprintf("ReplicaSets after re-applying the unchanged manifest: %d, want 2", n)
		}
		return ""
	})

	// Every snapshot is owned by the revisions that use it: the Deployment's
	// ReplicaSet and the StatefulSet's ControllerRevision, not the workloads.
	for _, name := range []string{cm1, cm2} {
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
				return false, err.Error()
			}
			var owners []string
			for _, o := range cm.OwnerReferences {
				owners = append(owners, o.Kind)
			}
			slices.Sort(owners)
			return slices.Equal(owners, []string{"ControllerRevision", "ReplicaSet"}), fmt.Sprintf("snapshot %s owners %v, want a ReplicaSet and a ControllerRevision", name, owners)
		})
	}

	// Unpin: the source names come back, in one rollout.
	env.Apply(t, app(ns, true))
	waitRolledOut(t, d)
	if cm, s := refs(d); cm != "cfg" || s != "db" || d.Spec.Template.Annotations[pin.AnnotationPinned] != "" {
		t.Fatalf("after unpinning: ConfigMap %q, Secret %q, %s=%q; want cfg, db and no annotation", cm, s, pin.AnnotationPinned, d.Spec.Template.Annotations[pin.AnnotationPinned])
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 3 {
		t.Fatalf("ReplicaSets after unpinning: %d, want 3", n)
	}

	// The garbage collector deletes the snapshots with their last owner.
	for _, obj := range []client.Object{d, sts} {
		if err := env.Client.Delete(t.Context(), obj, client.PropagationPolicy("Background")); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		var left []string
		for _, name := range []string{cm1, cm2} {
			err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				left = append(left, name)
			}
		}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sec1}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			left = append(left, sec1)
		}
		return len(left) == 0, fmt.Sprintf("snapshots left after their owners were deleted: %v", left)
	})

	onlySnapshotsWritten(t, ns)
}

// keeps checks, every half second for hold, that changed reports nothing
// (""): a "nothing rolled" check, failing with what changed reports.
func keeps(t *testing.T, hold time.Duration, changed func() string) {
	t.Helper()
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		if what := changed(); what != "" {
			t.Fatal(what)
		}
		<-time.After(500 * time.Millisecond)
	}
}

// onlySnapshotsWritten checks in the audit log that configstamp's only writes
// to ConfigMaps and Secrets of namespace ns were creates and patches of
// snapshots: never the sources, never an update or a delete.
func onlySnapshotsWritten(t *testing.T, ns string) {
	t.Helper()
	user := "system:serviceaccount:" + framework.OwnNamespace + ":" + serviceAccount
	snapshot := regexp.MustCompile(`-[0-9a-f]{10}$`)
	creates := 0
	for _, ev := range env.AuditEvents(t) {
		if ev.User.Username != user || !ev.Write() || ev.ObjectRef.Namespace != ns ||
			(ev.ObjectRef.Resource != "configmaps" && ev.ObjectRef.Resource != "secrets") || ev.Stage != "ResponseComplete" {
			continue
		}
		switch {
		case ev.Verb == "create":
			if ev.ResponseStatus.Code == 201 {
				creates++ // a lost race with another workload's admission is a 409 and creates nothing
			}
		case ev.Verb == "patch" && snapshot.MatchString(ev.ObjectRef.Name):
		default:
			t.Errorf("configstamp wrote %s %s %s/%s (%s)", ev.Verb, ev.ObjectRef.Resource, ns, ev.ObjectRef.Name, ev.RequestURI)
		}
	}
	if want := 3; creates != want { // cfg at a=1 and a=2, db once
		t.Errorf("configstamp created %d ConfigMaps and Secrets in %s, want %d (one per snapshot)", creates, ns, want)
	}
	if t.Failed() {
		return
	}
	t.Logf("configstamp's writes to ConfigMaps and Secrets of %s: %d creates, all of snapshots; no update, no delete", ns, creates)
}
