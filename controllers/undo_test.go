package controllers

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// The verified revision is found where the workload's kind keeps its
// revisions, numbered as it numbers them: the newest pinned one controlled by
// the workload and stamped verified.
func TestVerifiedRevision(t *testing.T) {
	kinds := workload.NewRegistry()
	tmpl := func(hash string) corev1.PodTemplateSpec {
		image := "app:1"
		if strings.HasSuffix(hash, "+edit") { // an image edited after the verified rollout: the same stamp
			hash, image = strings.TrimSuffix(hash, "+edit"), "app:2"
		}
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{"app": "w", appsv1.DefaultDeploymentUniqueLabelKey: "abc"},
			Annotations: map[string]string{stamp.AnnotationHash: hash}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
	}
	meta := func(owner client.Object, kind, name string, ann map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann, Labels: map[string]string{pin.LabelPinned: "true"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind(kind))}}
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "uid-dep"}}
	rs := func(name, rev, hash string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: meta(dep, "Deployment", name, map[string]string{"deployment.kubernetes.io/revision": rev}),
			Spec: appsv1.ReplicaSetSpec{Template: tmpl(hash)}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "uid-sts"}}
	cr := func(name string, rev int64, hash string) *appsv1.ControllerRevision {
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl(hash)}})
		if err != nil {
			t.Fatal(err)
		}
		return &appsv1.ControllerRevision{ObjectMeta: meta(sts, "StatefulSet", name, nil), Revision: rev, Data: runtime.RawExtension{Raw: raw}}
	}
	c := fake.NewClientBuilder().WithObjects(
		rs("rs-9", "9", "v1-good"), rs("rs-10", "10", "v1-good"), rs("rs-11", "11", "v1-good+edit"), rs("rs-12", "12", "v1-bad"),
		cr("cr-3", 3, "v1-good"), cr("cr-12", 12, "v1-good"), cr("cr-13", 13, "v1-good+edit"), cr("cr-14", 14, "v1-bad"),
	).Build()
	whole := tmpl("v1-good") // the template verified: its digest without the ReplicaSet's label
	verified := rollout.VerifiedID{Stamp: "v1-good", Template: rollout.TemplateDigest(&whole)}
	for _, tc := range []struct {
		obj       client.Object
		verified  rollout.VerifiedID
		want      int64
		hashLabel bool
	}{
		{dep, verified, 10, false}, {sts, verified, 12, true},
		// A record written before the digest names the stamp only: the newest of it.
		{dep, rollout.VerifiedID{Stamp: "v1-good"}, 11, false},
	} {
		kind, _ := kinds.Of(tc.obj)
		r := &kindReconciler{WorkloadReconciler: &WorkloadReconciler{Client: c}, Kind: kind}
		got, n, err := r.verifiedRevision(t.Context(), tc.obj, tc.verified)
		if err != nil || got == nil || n != tc.want {
			t.Fatalf("%s verified %s: revision %d (%v), want %d", kind.Name, tc.verified, n, err, tc.want)
		}
		if _, has := got.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; has != tc.hashLabel {
			t.Fatalf("%s: the revision's %s label kept: %v, want %v", kind.Name, appsv1.DefaultDeploymentUniqueLabelKey, has, tc.hashLabel)
		}
	}
}

// The undo's own rollout is judged like any other; when it fails too, that
// is told (UndoFailed) and not undone again (no second RolloutUndone nor
// UndoImpossible, no RolloutFailed of the change as if it failed anew), and
// the record closes back into the change's failure, its halt kept.
func TestUndoThatFailsIsReportedNotUndone(t *testing.T) {
	w := newHaltWorld(t, rollout.Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}, interceptor.Funcs{})
	failed := rollout.StartRecord(time.Now().Add(-5*time.Minute), []rollout.Change{w.change}, false)
	failed.Verified = "v1-good"
	undoing := failed.Fail(true).StartUndo(time.Now().Add(-2*time.Minute), "v1-good")
	w.setFailed(t, func(d *appsv1.Deployment) {
		withRecord(d, undoing, testKeys.Current())
		d.Spec.Replicas = ptr.To[int32](1)
	})
	live := &appsv1.Deployment{}
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(w.failed), live); err != nil {
		t.Fatal(err)
	}
	o := &rollout.Observation{Key: rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "failed"}, Kind: w.r.Kind, Object: live,
		Ours: true, Need: rollout.NeedsNothing, Verification: rollout.Verification{Read: true, Pods: 1,
			Problem: "pod failed-x: container app restarted 1 times (exit code 1, Error)"}}
	d, err := w.r.Scheduler.Decide(t.Context(), *o)
	if err != nil || d.Transition != rollout.CloseFailed || d.Failure == "" {
		t.Fatalf("decision %+v %v: want the undo's rollout closed as failed", d, err)
	}
	if _, err := w.r.act(t.Context(), o, d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for rec := w.r.Recorder.(*events.FakeRecorder); len(rec.Events) > 0; {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonUndoFailed) || !strings.Contains(got[0], "v1-good") {
		t.Fatalf("events %q: want one %s naming the revision, nothing else", got, ReasonUndoFailed)
	}
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(w.failed), live); err != nil {
		t.Fatal(err)
	}
	rec, err := rollout.Unseal(live, testKeys)
	if err != nil || rec.State != rollout.Failed || rec.Halted != failed.Cause || rec.Undo != "" {
		t.Fatalf("record %+v (%v): want failed again, halting its change, the undo over", rec, err)
	}
}
