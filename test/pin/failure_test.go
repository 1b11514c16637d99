package pin

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// held checks that the pinned Deployment d still runs what it ran: the same
// stamp and snapshot, one ReplicaSet, once the webhook said why (event).
func held(t *testing.T, d *appsv1.Deployment, hash, snapshot string, replicaSets int, fragment string) {
	t.Helper()
	env.WaitEvent(t, d, webhook.ReasonPinFailed, fragment)
	env.Get(t, d)
	if cm, _ := refs(d); framework.TemplateHash(d) != hash || cm != snapshot {
		t.Fatalf("while the snapshot cannot be made: stamp %s, ConfigMap %s; want %s and %s kept", framework.TemplateHash(d), cm, hash, snapshot)
	}
	if n := len(env.ReplicaSets(t, d.Namespace, d.Name)); n != replicaSets {
		t.Fatalf("ReplicaSets while the snapshot cannot be made: %d, want %d", n, replicaSets)
	}
}

// TestSnapshotCannotBeMade: a snapshot name held by an object that is not
// configstamp's, and an exhausted ConfigMap quota, keep the pinned workload on
// its current snapshot (never onto a missing or foreign one), with a PinFailed
// event; once the cause is gone the retry rolls it, once.
func TestSnapshotCannotBeMade(t *testing.T) {
	ns := withSources(t, "pinfail", "1")
	d := app(ns, false)
	env.Apply(t, d)
	waitRolledOut(t, d)
	h1 := framework.TemplateHash(d)
	cm1, _ := refs(d)

	// The name the change's snapshot will get, taken first by someone else.
	next := framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil)
	taken := pin.Name(stamp.NewHasher(key), next)
	env.Apply(t, framework.ConfigMap(ns, taken, map[string]string{"a": "not what cfg holds"}, nil))
	env.Apply(t, next)
	held(t, d, h1, cm1, 1, "taken")
	squatter := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: taken}, squatter); err != nil || squatter.Data["a"] != "not what cfg holds" {
		t.Fatalf("the object holding the name was changed: %v %v", err, squatter.Data)
	}

	// Freed: the retry rolls onto configstamp's own snapshot.
	freed := time.Now()
	if err := env.Client.Delete(t.Context(), squatter); err != nil {
		t.Fatal(err)
	}
	h2 := env.WaitTemplateHash(t, d, h1)
	waitRolledOut(t, d)
	if cm, _ := refs(d); cm != taken || configMapData(t, ns, cm, "cfg")["a"] != "2" {
		t.Fatalf("after the name was freed: ConfigMap %s, want configstamp's snapshot %s with a=2", cm, taken)
	}
	t.Logf("rolled %v after the name was freed", time.Since(freed).Round(time.Millisecond))

	// An exhausted quota on ConfigMaps: the next change waits for room.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cms"}}
	setQuota := func(n int64) {
		t.Helper()
		_, err := controllerutil.CreateOrUpdate(t.Context(), env.Client, quota, func() error {
			quota.Spec.Hard = corev1.ResourceList{"count/configmaps": *resource.NewQuantity(n, resource.DecimalSI)}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cms := &corev1.ConfigMapList{}
	if err := env.Client.List(t.Context(), cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	setQuota(int64(len(cms.Items)))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, quota)
		used := quota.Status.Used["count/configmaps"]
		return used.Value() == int64(len(cms.Items)), fmt.Sprintf("quota used %s", used.String())
	})
	cm2, _ := refs(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "3"}, nil))
	held(t, d, h2, cm2, 2, "exceeded quota")
	setQuota(int64(len(cms.Items)) + 1)
	env.WaitTemplateHash(t, d, h2)
	waitRolledOut(t, d)
	if cm, _ := refs(d); configMapData(t, ns, cm, "cfg")["a"] != "3" {
		t.Fatalf("after the quota was raised: ConfigMap %s does not hold a=3", cm)
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 3 {
		t.Fatalf("ReplicaSets after two changes held back and released: %d, want 3", n)
	}
}

// TestUndoIsNeverSilent: kubectl rollout undo of an unpinned Deployment after
// a ConfigMap change cannot bring the old configuration back (the ConfigMap
// holds the new data); configstamp keeps the current stamp and says so: an
// admission warning kubectl prints, and an UndoKeptConfig event.
func TestUndoIsNeverSilent(t *testing.T) {
	ns := withSources(t, "undo", "1")
	d := app(ns, true)
	env.Apply(t, d)
	waitRolledOut(t, d)
	h1 := framework.TemplateHash(d)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil))
	h2 := env.WaitTemplateHash(t, d, h1)
	waitRolledOut(t, d)
	// configstamp closes the rollout record once it sees the rollout
	// complete, a moment after the Deployment says so: that closed record is
	// the one the undo must keep.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, d)
		return d.Annotations[rollout.AnnotationState] == string(rollout.Completed), "rollout-state " + d.Annotations[rollout.AnnotationState]
	})

	before := framework.TemplateJSON(t, d)
	record := func() string {
		a := d.Annotations
		return strings.Join([]string{a[rollout.AnnotationState], a[rollout.AnnotationStarted], a[rollout.AnnotationCause], a[rollout.AnnotationSeal]}, " ")
	}
	recorded := record()
	out, stderr := env.Kubectl(t, "", "rollout", "undo", "-n", ns, "deployment/app")
	if !strings.Contains(out, "rolled back") || !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "revert the ConfigMap") {
		t.Fatalf("kubectl rollout undo printed %q / %q; want the warning that nothing rolled back", out, stderr)
	}
	env.WaitEvent(t, d, webhook.ReasonUndoKept, h1, h2)
	env.Get(t, d)
	if after := framework.TemplateJSON(t, d); after != before || framework.TemplateHash(d) != h2 {
		t.Fatalf("the undo changed the template:\nbefore %s\nafter  %s", before, after)
	}
	// The undo set the annotations to the first revision's, which had no
	// rollout record; configstamp keeps its record (a halt would stay).
	if got := record(); got != recorded || !strings.HasPrefix(got, "completed ") {
		t.Fatalf("rollout record after the undo: %q, want %q kept", got, recorded)
	}
	if n := len(env.ReplicaSets(t, ns, "app")); n != 2 {
		t.Fatalf("ReplicaSets after the undo: %d, want 2", n)
	}
}

// TestLargeSourceIsPinned: a ConfigMap holding just under the 1 MiB data
// limit (created through the API: kubectl apply's last-applied copy would not
// fit) is copied whole; the pinned Deployment starts on its snapshot.
func TestLargeSourceIsPinned(t *testing.T) {
	ns := env.Namespace(t, "pinlarge", nil)
	big := strings.Repeat("x", 1<<20-64)
	if err := env.Client.Create(t.Context(), framework.ConfigMap(ns, "cfg", map[string]string{"a": big}, nil)); err != nil {
		t.Fatal(err)
	}
	env.Apply(t, framework.Secret(ns, "db", map[string]string{"password": "s1"}))
	d := app(ns, false)
	env.Apply(t, d)
	waitRolledOut(t, d)
	cm, _ := refs(d)
	if got := configMapData(t, ns, cm, "cfg"); got["a"] != big {
		t.Fatalf("the snapshot %s holds %d bytes, want the source's %d", cm, len(got["a"]), len(big))
	}
}

// TestNamespacePins: configstamp.io/pin on a Namespace pins every opted-in
// workload in it; "false" on a workload opts it out.
func TestNamespacePins(t *testing.T) {
	ns := env.Namespace(t, "pinns", nil)
	env.Kubectl(t, "", "annotate", "namespace", ns, pin.AnnotationPin+"=true")
	applySources(t, ns, "1")
	pinned, out := app(ns, true), app(ns, true)
	out.Name = "out"
	out.Annotations = map[string]string{pin.AnnotationPin: "false"}
	env.Apply(t, pinned, out)
	env.Get(t, pinned)
	env.Get(t, out)
	if cm, s := refs(pinned); !snapshotName("cfg").MatchString(cm) || !snapshotName("db").MatchString(s) {
		t.Errorf("in a pinned namespace, the Deployment references %s and %s, want snapshots", cm, s)
	}
	if cm, s := refs(out); cm != "cfg" || s != "db" {
		t.Errorf("the Deployment that opts out references %s and %s, want the sources", cm, s)
	}
}

// TestDeletedSnapshotIsMadeAgain: a tenant deletes the snapshot a pinned
// Deployment's pods read while its source still holds that content:
// configstamp makes it again, with the same name and data, owned by the
// ReplicaSet that names it, says so, and rolls nothing.
func TestDeletedSnapshotIsMadeAgain(t *testing.T) {
	ns := withSources(t, "pingone", "1")
	kc := env.Tenant(t, ns)
	d := app(ns, false)
	env.Apply(t, d)
	waitRolledOut(t, d)
	h1 := framework.TemplateHash(d)
	cm, secret := refs(d)
	for _, obj := range []string{"configmap/" + cm, "secret/" + secret} {
		if out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "delete", obj).CombinedOutput(); err != nil {
			t.Fatalf("the tenant's delete of %s: %v\n%s", obj, err, out)
		}
	}
	env.WaitEvent(t, d, controllers.ReasonSnapshotRestored, "made it again") // one event: the second is a repeat of the first
	rs := env.ReplicaSets(t, ns, "app")
	if len(rs) != 1 {
		t.Fatalf("ReplicaSets after the snapshots were deleted: %d, want 1", len(rs))
	}
	for name, obj := range map[string]client.Object{cm: &corev1.ConfigMap{}, secret: &corev1.Secret{}} {
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj)
			return err == nil, fmt.Sprintf("%s: %v", name, err)
		})
		owners := obj.GetOwnerReferences()
		if len(owners) != 1 || owners[0].Kind != "ReplicaSet" || owners[0].UID != rs[0].UID {
			t.Fatalf("%s made again with owners %v, want the ReplicaSet %s", name, owners, rs[0].Name)
		}
	}
	if got := configMapData(t, ns, cm, "cfg"); got["a"] != "1" {
		t.Fatalf("the ConfigMap snapshot made again holds %v, want a=1", got)
	}
	env.Get(t, d)
	if c, s := refs(d); framework.TemplateHash(d) != h1 || c != cm || s != secret {
		t.Fatalf("after the snapshots were made again: stamp %s on %s, %s; want %s on %s, %s (nothing rolled)", framework.TemplateHash(d), c, s, h1, cm, secret)
	}
}
