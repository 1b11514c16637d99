package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// The undo's own rollout is followed like any rollout (it is open, holds a
// slot) and, however it ends, closes back into the failure it undid: failed,
// the change's halt and the canary's hold as they were, never undone again.
func TestUndoIsFollowedThenClosedIntoItsFailure(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	hold := workload.Hold{{Path: "spec.strategy.rollingUpdate.maxSurge", Set: float64(1)}, {Path: "spec.paused", Set: true}}
	failed := StartRecord(t0.Add(-5*time.Minute), cause, false).AsCanary(hold.Encode())
	failed.Verified = "v1-good"
	failed = failed.Fail(true)
	undoing := failed.StartUndo(t0.Add(-10*time.Second), "v1-good")
	if !undoing.Open() || undoing.Canary != NoCanary || undoing.Halted != failed.Halted || undoing.Hold != failed.Hold || undoing.Undo != "v1-good" {
		t.Fatalf("undo's record %+v: want it open, no canary, the halt and hold kept", undoing)
	}
	// What ends it (whatever the policy's halting) is the failure it undid.
	want := failed
	want.Started, want.Canary = undoing.Started, NoCanary
	for _, policy := range []Policy{{ProgressDeadline: time.Minute, HaltOnFailure: true}, {ProgressDeadline: time.Minute}} {
		ended := map[string]struct {
			rec      Record
			complete bool
			failure  bool
		}{
			"verified":               {undoing, true, false},
			"failed at its deadline": {failed.StartUndo(t0.Add(-2*time.Minute), "v1-good"), false, true},
		}
		for name, tc := range ended {
			sit := Situation{Observation: Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", tc.complete, nil), Ours: true,
				Need: NeedsRollout}, Record: tc.rec, Now: t0}
			p := Rules(sit, policy)
			w := want
			w.Started = tc.rec.Started
			if !p.Transition.closes() || p.Record == nil || *p.Record != w || (p.Failure != "") != tc.failure {
				t.Fatalf("%s (halting %v): ruling %+v, want closed as %+v, failure %v", name, policy.HaltOnFailure, p, w, tc.failure)
			}
		}
	}
	// Still rolling: followed by its deadline, not superseded by the halted
	// change (the gate holds it) nor judged as a canary.
	sit := Situation{Observation: Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", false, nil), Ours: true, Need: NeedsNothing},
		Record: undoing, Now: t0}
	if p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}); p.Transition != Follow {
		t.Fatalf("rolling undo: ruling %+v, want it followed", p)
	}
}

// An undo whose rollout fails freezes nothing: its canary's freeze was put
// back by the undo, and pausing the verified revision's rollout would leave
// the workload half way.
func TestFailedUndoFreezesNothing(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	hold := workload.Hold{{Path: "spec.strategy.rollingUpdate.maxSurge", Set: float64(1)}}
	undoing := StartRecord(t0.Add(-5*time.Minute), cause, false).AsCanary(hold.Encode()).Fail(true).StartUndo(t0.Add(-10*time.Second), "v1-good")
	o := Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", &undoing), Ours: true, Need: NeedsNothing, VerifyWindow: 30 * time.Second,
		Verification: Verification{Read: true, Pods: 3, Problem: "pod a-x: container app restarted 1 times"}}
	o.Object.(*appsv1.Deployment).Status.UpdatedReplicas = 1
	d, err := s.Decide(t.Context(), o)
	if err != nil || d.Transition != CloseFailed || d.Failure == "" || d.Record.State != Failed || d.Record.Undo != "" {
		t.Fatalf("failing undo: %+v %v; want it closed failed", d, err)
	}
	if len(d.Hold) != 0 || d.Record.Hold != undoing.Hold {
		t.Fatalf("failing undo writes the freeze %+v (record hold %s), want nothing more than its hold %s", d.Hold, d.Record.Hold, undoing.Hold)
	}
}

// An undo returns only over configstamp's own change: the failed template
// may differ from the revision it returns to in its stamp and its
// snapshots, never in anything a user edited meanwhile.
func TestEditedSince(t *testing.T) {
	template := func(hash, snapshot, image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{
				stamp.AnnotationHash: hash, pin.AnnotationPinned: "ConfigMap/" + snapshot + "=shared"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: snapshot}}}}}},
		}
	}
	prev := template("v1-old", "shared-old", "app:1")
	tests := map[string]struct {
		failed *corev1.PodTemplateSpec
		want   string
	}{
		"only configstamp's stamp and snapshot changed": {template("v1-new", "shared-new", "app:1"), ""},
		"an image edited during the failing rollout":    {template("v1-new", "shared-new", "app:2"), "its pod spec"},
		"a restart annotation added": {func() *corev1.PodTemplateSpec {
			t := template("v1-new", "shared-new", "app:1")
			t.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-11-27T12:00:00Z"
			return t
		}(), "its annotations"},
		"a label changed": {func() *corev1.PodTemplateSpec {
			t := template("v1-new", "shared-new", "app:1")
			t.Labels["tier"] = "front"
			return t
		}(), "its labels"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := editedSince(tc.failed, prev); (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("editedSince = %q, want %q", got, tc.want)
			}
		})
	}
}

// The cache keeps a workload slim (no images, resources, probes): the undo
// judges the failed template read live (UndoFacts.Template), else every
// verified revision would look edited and no undo would ever happen; an
// edit the live template shows still refuses it.
func TestUndoJudgesTheLiveTemplateNotTheSlimCopy(t *testing.T) {
	late := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false)
	late.Verified = "v1-good"
	withImage := func(image string) func(*corev1.PodTemplateSpec) {
		return func(tmpl *corev1.PodTemplateSpec) {
			tmpl.Spec.Containers = []corev1.Container{{Name: "app", Image: image}}
		}
	}
	o := pinnedUndo(late, withImage("app:1")) // the revision, whole
	live := o.Kind.PodTemplate(o.Object).DeepCopy()
	withImage("app:1")(live)
	o.Undo.Template = live
	if d := (fixture{o: o}).decide(t); d.Undo == nil {
		t.Fatalf("events %q: want the undo, the live template equal to the revision but for the stamp", told(d.Effects))
	}
	withImage("app:2")(live) // a user's edit since
	if d := (fixture{o: o}).decide(t); d.Undo != nil {
		t.Fatalf("undo %+v over an image edited since", d.Undo)
	}
}

// The verified identity is the whole template: the record of a workload
// that asks for undo names its verified revision's digest too, and an
// undo goes back only to that template. An image edited after the verified
// rollout made a revision of the same stamp that was never verified: the
// undo does not return to it (item 7 of issue "The canary at every edge").
// Before, the stamp alone named it, and the undo returned to it.
func TestUndoReturnsOnlyToTheVerifiedTemplate(t *testing.T) {
	withImage := func(image string) func(*corev1.PodTemplateSpec) {
		return func(tmpl *corev1.PodTemplateSpec) {
			tmpl.Spec.Containers = []corev1.Container{{Name: "app", Image: image}}
		}
	}
	verified := pinnedUndo(Record{}, withImage("app:1")).Undo.Revision
	late := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false)
	late.Verified = VerifiedID{Stamp: "v1-good", Template: TemplateDigest(verified)}.String()

	failing := func(image string) Observation { // the revision of the verified stamp found, and the live template
		o := pinnedUndo(late, withImage(image))
		live := o.Kind.PodTemplate(o.Object).DeepCopy()
		withImage(image)(live)
		o.Undo.Template = live
		return o
	}
	if d := (fixture{o: failing("app:1")}).decide(t); d.Undo == nil {
		t.Fatalf("events %q: want the undo to the verified template", told(d.Effects))
	}
	d := (fixture{o: failing("app:2")}).decide(t) // the newest revision of the verified stamp: an image edited since
	if d.Undo != nil || !strings.Contains(strings.Join(told(d.Effects), "\n"), "UndoImpossible") {
		t.Fatalf("undo %+v, events %q: want no undo to a template never verified, and UndoImpossible", d.Undo, told(d.Effects))
	}
}

// A rollout of a workload that asks for undo closes naming its whole
// template, read live while it rolled; a live read of another generation
// (an edit landed since) names the stamp only.
func TestAVerifiedRolloutNamesItsWholeTemplate(t *testing.T) {
	verifying := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false).StartVerifying(t0.Add(-time.Second))
	o := observation(false, nil, NeedsNothing)
	d := o.Object.(*appsv1.Deployment)
	d.Spec.Template.Annotations = map[string]string{stamp.AnnotationHash: "v1-good"}
	sealed(d, verifying, testKeys.Current())
	o.Verification = Verification{Read: true, Healthy: true, Pods: 3}
	o.Undo = UndoFacts{Wanted: true, Pin: true, Template: d.Spec.Template.DeepCopy(), Current: "0123456789abcdef"}
	got := (fixture{o: o}).decide(t)
	if got.Record == nil || got.Record.State != Completed || got.Record.Verified != "v1-good.0123456789abcdef" {
		t.Fatalf("record %+v: want completed, verified v1-good.0123456789abcdef", got.Record)
	}
	o.Undo.Current = ""
	if got := (fixture{o: o}).decide(t); got.Record == nil || got.Record.Verified != "v1-good" {
		t.Fatalf("record %+v: want verified v1-good (no digest read)", got.Record)
	}
}
