package controllers

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// keeperWorld is a pinned Deployment whose template names the snapshot of
// cfg (a=1), which does not exist.
type keeperWorld struct {
	c        client.Client
	k        *SnapshotKeeper
	rec      *events.FakeRecorder
	req      reconcile.Request
	snapshot string
}

func newKeeperWorld(t *testing.T, extra ...client.Object) *keeperWorld {
	t.Helper()
	keys := stamp.NewKeyring([]byte("keeper-test-key-0123456789abcdef"))
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1"}}
	name := pin.Name(keys.Current(), cfg)
	spec := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: types.UID("app-uid")},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
	pin.Apply(&d.Spec.Template, pin.Pins{{Kind: stamp.KindConfigMap, Name: "cfg"}: name})
	b := fake.NewClientBuilder().WithObjects(append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, cfg, d}, extra...)...)
	for _, k := range workload.NewRegistry().All() {
		b = b.WithIndex(k.New(), IndexPinned, indexPinned(k))
	}
	c := b.Build()
	rec := events.NewFakeRecorder(10)
	k := &SnapshotKeeper{Kind: stamp.KindConfigMap, Cache: c, Reader: c, Snapshots: &pin.Snapshots{Reader: c, Writer: c}, Keys: keys, Recorder: rec}
	k.retry = newKeeperRetry()
	return &keeperWorld{c: c, k: k, rec: rec, req: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}, snapshot: name}
}

func (w *keeperWorld) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := w.k.Reconcile(t.Context(), w.req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (w *keeperWorld) events() []string {
	var out []string
	for {
		select {
		case e := <-w.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestKeeperMakesTheSnapshotAgain: the source still holds the content: the
// snapshot is made again, owned by the workload (no revision names it here),
// with one Normal event, and nothing is asked again.
func TestKeeperMakesTheSnapshotAgain(t *testing.T) {
	w := newKeeperWorld(t)
	if res := w.reconcile(t); res.RequeueAfter != 0 {
		t.Fatalf("asked again after %v, want done", res.RequeueAfter)
	}
	cm := &corev1.ConfigMap{}
	if err := w.c.Get(t.Context(), w.req.NamespacedName, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["a"] != "1" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "app-uid" || cm.OwnerReferences[0].Kind != "Deployment" {
		t.Fatalf("made again with data %v, owners %v; want a=1 owned by the Deployment", cm.Data, cm.OwnerReferences)
	}
	if ev := w.events(); len(ev) != 1 || !strings.Contains(ev[0], "Normal "+ReasonSnapshotRestored) {
		t.Fatalf("events %q, want one %s", ev, ReasonSnapshotRestored)
	}
}

// TestKeeperSaysOnceWhatIsLost: the source changed: nothing is made, one
// Warning (not one per attempt), and the attempts back off.
func TestKeeperSaysOnceWhatIsLost(t *testing.T) {
	w := newKeeperWorld(t)
	cfg := &corev1.ConfigMap{}
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "cfg"}, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Data["a"] = "2"
	if err := w.c.Update(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	first, second := w.reconcile(t), w.reconcile(t)
	if first.RequeueAfter != keeperRetryFirst || second.RequeueAfter != 2*keeperRetryFirst {
		t.Fatalf("asked again after %v then %v, want %v then %v", first.RequeueAfter, second.RequeueAfter, keeperRetryFirst, 2*keeperRetryFirst)
	}
	if err := w.c.Get(t.Context(), w.req.NamespacedName, &corev1.ConfigMap{}); err == nil {
		t.Fatal("a snapshot was made from content that is not the snapshot's")
	}
	ev := w.events()
	if len(ev) != 1 || !strings.Contains(ev[0], "Warning "+ReasonSnapshotLost) || !strings.Contains(ev[0], "no longer holds its content") {
		t.Fatalf("events %q, want one %s saying the content is gone", ev, ReasonSnapshotLost)
	}

	// cfg back to the snapshot's content: the next attempt makes it again.
	cfg.Data["a"] = "1"
	if err := w.c.Update(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if res := w.reconcile(t); res.RequeueAfter != 0 {
		t.Fatalf("asked again after %v once the content was back", res.RequeueAfter)
	}
	if err := w.c.Get(t.Context(), w.req.NamespacedName, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("not made again once the content was back: %v", err)
	}
}

// TestKeeperLeavesAForeignObjectAlone: an object that is not configstamp's
// holds the name: it is neither used nor changed, and the loss is reported.
func TestKeeperLeavesAForeignObjectAlone(t *testing.T) {
	probe := newKeeperWorld(t)
	squatter := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: probe.snapshot}, Data: map[string]string{"a": "mine"}}
	w := newKeeperWorld(t, squatter)
	if res := w.reconcile(t); res.RequeueAfter != keeperRetryFirst {
		t.Fatalf("asked again after %v, want %v", res.RequeueAfter, keeperRetryFirst)
	}
	got := &corev1.ConfigMap{}
	if err := w.c.Get(t.Context(), w.req.NamespacedName, got); err != nil || got.Data["a"] != "mine" || len(got.OwnerReferences) != 0 {
		t.Fatalf("the foreign object was changed: %v %v %v", err, got.Data, got.OwnerReferences)
	}
	if ev := w.events(); len(ev) != 1 || !strings.Contains(ev[0], "Warning "+ReasonSnapshotLost) || !strings.Contains(ev[0], "taken") {
		t.Fatalf("events %q, want one %s saying the name is taken", ev, ReasonSnapshotLost)
	}
}
