package pin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// hold is how long a rolled-back workload must keep its revision: past every
// delay configstamp adds (the suite runs with --debounce=0) plus 30 s.
const hold = 30 * time.Second

// mountedSnapshot is the ConfigMap a pinned workload's template mounts.
func mountedSnapshot(obj client.Object) string {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Spec.Volumes[0].ConfigMap.Name
	case *appsv1.StatefulSet:
		return w.Spec.Template.Spec.Volumes[0].ConfigMap.Name
	}
	return ""
}

// TestPinnedUndo: after three changes, kubectl rollout undo of a pinned
// Deployment and a pinned StatefulSet brings back the previous revision's
// template, with its snapshot (holding the old data) and its stamp;
// configstamp keeps it, past its debounce plus 30 s, and through a re-apply
// of the manifest; the next change of the source rolls each forward once.
func TestPinnedUndo(t *testing.T) {
	ns := withSources(t, "pinundo", "1")
	d := app(ns, false)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	sts := framework.StatefulSet(ns, "db-app", framework.OptIn, spec)
	sts.Annotations = map[string]string{pin.AnnotationPin: "true"}
	env.Apply(t, d, sts)
	waitRolledOut(t, d)
	env.WaitStatefulSetRolledOut(t, sts)

	stamps := map[string]string{} // data value -> the Deployment's stamp with it
	snapshots := map[string]string{}
	for _, v := range []string{"2", "3"} {
		before := framework.TemplateHash(d)
		env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": v}, nil))
		stamps[v] = env.WaitTemplateHash(t, d, before)
		waitRolledOut(t, d)
		snapshots[v] = mountedSnapshot(d)
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			env.Get(t, sts)
			return mountedSnapshot(sts) == snapshots[v], fmt.Sprintf("StatefulSet mounts %s, want %s", mountedSnapshot(sts), snapshots[v])
		})
		env.WaitStatefulSetRolledOut(t, sts)
	}
	revisions := env.Revisions(t, ns, "db-app")

	// The undo: back to the revision with a=2, its snapshot and its stamp.
	env.Kubectl(t, "", "rollout", "undo", "-n", ns, "deployment/app")
	env.Kubectl(t, "", "rollout", "undo", "-n", ns, "statefulset/db-app")
	env.Get(t, d)
	env.Get(t, sts)
	if got := mountedSnapshot(d); got != snapshots["2"] || framework.TemplateHash(d) != stamps["2"] {
		t.Fatalf("after the undo the Deployment mounts %s with stamp %s; want the previous revision's %s and %s", got, framework.TemplateHash(d), snapshots["2"], stamps["2"])
	}
	if got := configMapData(t, ns, snapshots["2"], "cfg"); got["a"] != "2" {
		t.Fatalf("the previous revision's snapshot holds %v, want a=2", got)
	}
	if got := mountedSnapshot(sts); got != snapshots["2"] {
		t.Fatalf("after the undo the StatefulSet mounts %s, want %s", got, snapshots["2"])
	}
	if _, secret := refs(d); sts.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name != secret || !snapshotName("db").MatchString(secret) {
		t.Fatalf("the StatefulSet reads Secret %s, the Deployment %s: want the same snapshot of db", sts.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name, secret)
	}
	env.WaitEvent(t, d, webhook.ReasonRolledBack, stamps["2"])
	waitRolledOut(t, d)
	env.WaitStatefulSetRolledOut(t, sts)
	if n := len(env.ReplicaSets(t, ns, "app")); n != 3 {
		t.Fatalf("ReplicaSets after the undo: %d, want 3 (the undo reuses the previous revision's)", n)
	}
	if n := env.Revisions(t, ns, "db-app"); n != revisions {
		t.Fatalf("ControllerRevisions after the undo: %d, want %d (the undo reuses the previous revision)", n, revisions)
	}

	// The plugin tells: rolled back by a user, pinned to the old snapshot.
	var why struct {
		Pinned       []string `json:"pinned"`
		RolledBackTo string   `json:"rolledBackTo"`
		Summary      string   `json:"summary"`
	}
	if err := json.Unmarshal([]byte(plugin(t, "why", "deployment/app", "-n", ns, "-o", "json")), &why); err != nil {
		t.Fatal(err)
	}
	if why.RolledBackTo != stamps["2"] || !slices.Contains(why.Pinned, "ConfigMap/cfg="+snapshots["2"]) || !strings.HasPrefix(why.Summary, "rolled back by a user") {
		t.Errorf("kubectl configstamp why after the undo: %+v; want rolled back to %s, pinned to %s", why, stamps["2"], snapshots["2"])
	}
	var status struct {
		RolledBack []struct {
			Name  string `json:"name"`
			Stamp string `json:"stamp"`
		} `json:"rolledBack"`
	}
	if err := json.Unmarshal([]byte(plugin(t, "status", "-n", ns, "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if len(status.RolledBack) != 2 {
		t.Errorf("kubectl configstamp status lists %+v as rolled back, want app and db-app", status.RolledBack)
	}
	if users := plugin(t, "who-uses", "configmap/cfg", "-n", ns); !strings.Contains(users, "app") || !strings.Contains(users, "db-app") {
		t.Errorf("kubectl configstamp who-uses configmap/cfg does not list the pinned workloads:\n%s", users)
	}

	// No roll forward: not for the debounce plus 30 s, not for a re-apply.
	env.Apply(t, app(ns, false))
	keeps(t, hold, func() string {
		env.Get(t, d)
		env.Get(t, sts)
		if mountedSnapshot(d) != snapshots["2"] || mountedSnapshot(sts) != snapshots["2"] || framework.TemplateHash(d) != stamps["2"] {
			return fmt.Sprintf("rolled forward without a source change: Deployment %s (%s), StatefulSet %s", mountedSnapshot(d), framework.TemplateHash(d), mountedSnapshot(sts))
		}
		return ""
	})
	t.Logf("both kept the rolled-back revision (snapshot %s) for %v and through a re-apply", snapshots["2"], hold)

	// The next change rolls each forward, once.
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "4"}, nil))
	env.WaitTemplateHash(t, d, stamps["2"])
	waitRolledOut(t, d)
	if got := configMapData(t, ns, mountedSnapshot(d), "cfg"); got["a"] != "4" || d.Annotations[pin.AnnotationRolledBack] != "" {
		t.Fatalf("after the next change the Deployment mounts %s holding %v (%s=%q); want a=4 and no rollback mark",
			mountedSnapshot(d), got, pin.AnnotationRolledBack, d.Annotations[pin.AnnotationRolledBack])
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 4 {
		t.Fatalf("ReplicaSets after the next change: %d, want 4 (one rollout)", n)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, sts)
		return mountedSnapshot(sts) == mountedSnapshot(d), fmt.Sprintf("StatefulSet mounts %s, want %s", mountedSnapshot(sts), mountedSnapshot(d))
	})
	// The StatefulSet controller makes the revision a moment after the
	// template changes: wait for it, then check that the rollout added no other.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.Revisions(t, ns, "db-app")
		return n == revisions+1, fmt.Sprintf("ControllerRevisions after the next change: %d, want %d", n, revisions+1)
	})
	env.WaitStatefulSetRolledOut(t, sts)
	if n := env.Revisions(t, ns, "db-app"); n != revisions+1 {
		t.Fatalf("ControllerRevisions once the next change rolled out: %d, want %d (one rollout)", n, revisions+1)
	}
}

var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// plugin runs kubectl-configstamp (built once, from cmd/kubectl-configstamp)
// against the suite's cluster and returns its output.
func plugin(t *testing.T, args ...string) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginBin = filepath.Join(os.TempDir(), fmt.Sprintf("kubectl-configstamp-pin-%d", os.Getpid()))
		if out, err := exec.Command("go", "build", "-o", pluginBin, "../../cmd/kubectl-configstamp").CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("building the plugin: %w\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	out, err := exec.Command(pluginBin, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl configstamp %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUndoAcrossKeyRotation: the hash key is rotated (as docs/security.md
// says: a new key in the key Secret) after three revisions of a pinned
// Deployment. Nothing rolls, not for the rotation nor for a re-apply of the
// manifest: the stamp and the snapshot names stay. An undo to the first
// revision, whose snapshot was deleted meanwhile, cannot bring its
// configuration back: it keeps the current stamp and snapshots and the
// rollout record, and kubectl prints why. kubectl rollout undo then brings
// back the second revision, stamped under the old key, and configstamp
// recognises it as a rollback and keeps it.
func TestUndoAcrossKeyRotation(t *testing.T) {
	ns := withSources(t, "pinrot", "0")
	d := app(ns, false)
	env.Apply(t, d)
	waitRolledOut(t, d)
	h0, cm0 := framework.TemplateHash(d), mountedSnapshot(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "1"}, nil))
	h1 := env.WaitTemplateHash(t, d, h0)
	waitRolledOut(t, d)
	cm1 := mountedSnapshot(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil))
	h2 := env.WaitTemplateHash(t, d, h1)
	waitRolledOut(t, d)
	cm2, sec2 := refs(d)
	keyID := d.Annotations[stamp.AnnotationKeyID]

	rotate := func(k []byte) {
		t.Helper()
		env.Apply(t, framework.Secret(framework.OwnNamespace, "configstamp-hash-key", map[string]string{"key": string(k)}))
	}
	rotate([]byte("pin-suite-rotated-key-0123456789ab"))
	t.Cleanup(func() { rotate(key) })
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, d)
		return d.Annotations[stamp.AnnotationKeyID] != keyID, fmt.Sprintf("record key id still %s", keyID)
	})
	env.Apply(t, app(ns, false))
	keeps(t, hold, func() string {
		env.Get(t, d)
		if cm, sec := refs(d); framework.TemplateHash(d) != h2 || cm != cm2 || sec != sec2 {
			return fmt.Sprintf("after the key rotation and a re-apply: stamp %s on %s, %s; want %s on %s, %s (nothing rolls)", framework.TemplateHash(d), cm, sec, h2, cm2, sec2)
		}
		if n := len(env.ReplicaSets(t, ns, "app")); n != 3 {
			return fmt.Sprintf("ReplicaSets after the key rotation: %d, want 3", n)
		}
		return ""
	})

	// The first revision's snapshot is gone: its undo brings nothing back.
	if err := env.Client.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cm0}}); err != nil {
		t.Fatal(err)
	}
	env.Get(t, d)
	record := func() string {
		return strings.Join([]string{d.Annotations[rollout.AnnotationState], d.Annotations[rollout.AnnotationStarted], d.Annotations[rollout.AnnotationSeal]}, " ")
	}
	recorded := record()
	_, stderr := env.Kubectl(t, "", "rollout", "undo", "-n", ns, "deployment/app", "--to-revision=1")
	env.Get(t, d)
	if framework.TemplateHash(d) != h2 || mountedSnapshot(d) != cm2 || record() != recorded || !strings.Contains(stderr, "revert the ConfigMap") {
		t.Fatalf("after an undo to the revision (%s, %s) whose snapshot is gone: stamp %s on %s, record %q (was %q); want %s on %s and the record kept, with the warning; kubectl said %s",
			h0, cm0, framework.TemplateHash(d), mountedSnapshot(d), record(), recorded, h2, cm2, stderr)
	}

	_, stderr = env.Kubectl(t, "", "rollout", "undo", "-n", ns, "deployment/app")
	env.Get(t, d)
	if framework.TemplateHash(d) != h1 || mountedSnapshot(d) != cm1 || d.Annotations[pin.AnnotationRolledBack] != h1 {
		t.Fatalf("after the undo across the rotation: stamp %s on %s (%s=%q), want the second revision's %s on %s; kubectl said %s",
			framework.TemplateHash(d), mountedSnapshot(d), pin.AnnotationRolledBack, d.Annotations[pin.AnnotationRolledBack], h1, cm1, stderr)
	}
	env.WaitEvent(t, d, webhook.ReasonRolledBack, h1)
	keeps(t, hold, func() string {
		env.Get(t, d)
		if framework.TemplateHash(d) != h1 || mountedSnapshot(d) != cm1 {
			return fmt.Sprintf("rolled forward after the undo: stamp %s on %s, want %s on %s", framework.TemplateHash(d), mountedSnapshot(d), h1, cm1)
		}
		return ""
	})
	if n := len(env.ReplicaSets(t, ns, "app")); n != 3 {
		t.Fatalf("ReplicaSets after the undo: %d, want 3 (the second one back)", n)
	}
}
