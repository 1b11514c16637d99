package controllers

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// testKeys is the installation keyring of the tests of this package.
var testKeys = stamp.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))

// withRecord writes rec on obj as configstamp does: merge-patched (nil
// deletes) and sealed with h for obj's UID. It returns obj.
func withRecord[T client.Object](obj T, rec rollout.Record, h *stamp.Hasher) T {
	a := maps.Clone(obj.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range rec.Annotations(obj.GetUID(), h) {
		if v == nil {
			delete(a, k)
		} else {
			a[k] = v.(string)
		}
	}
	obj.SetAnnotations(a)
	return obj
}

var sharedRef = stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}

// haltWorld is a namespace where the ConfigMap "shared" is referenced by two
// Deployments: "failed", on which a rollout of it may have failed, and
// "waiting", whose rollout of it is gated.
type haltWorld struct {
	c               client.WithWatch
	r               *kindReconciler
	failed, waiting *appsv1.Deployment
	// change is what "failed" references of "shared" now, as a rollout cause:
	// the content a halt of it holds as long as it is unchanged.
	change rollout.Change
	// comp: what "waiting" computes now.
	comp *workload.Computation
}

func newHaltWorld(t *testing.T, policy rollout.Policy, funcs interceptor.Funcs) *haltWorld {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: sharedRef.Name}}}}}}}
	w := &haltWorld{
		failed:  &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "failed", UID: "uid-failed"}, Spec: appsv1.DeploymentSpec{Template: tmpl}},
		waiting: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "waiting", UID: "uid-waiting"}, Spec: appsv1.DeploymentSpec{Template: tmpl}},
	}
	shared := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: sharedRef.Name}, Data: map[string]string{"k": "broken"}}
	w.c = indexedBuilder(shared, w.failed, w.waiting).WithInterceptorFuncs(funcs).Build()
	resolver := &workload.Resolver{Sources: w.c, Index: w.c, Keys: testKeys}
	scheduler := rollout.NewScheduler(policy, w.c, testKeys, nil)
	scheduler.Halts = &rollout.Halts{Reader: w.c, Resolver: resolver}
	w.r = &kindReconciler{Kind: workload.NewRegistry().All()[0], WorkloadReconciler: &WorkloadReconciler{Client: w.c, Recorder: events.NewFakeRecorder(10), Resolver: resolver,
		Scheduler: scheduler}}
	comp, err := resolver.Compute(t.Context(), "ns", nil, &tmpl)
	if err != nil {
		t.Fatal(err)
	}
	w.comp, w.change = comp, rollout.Change{Ref: sharedRef, Content: comp.Sources[sharedRef]}
	if w.change.Content == "" {
		t.Fatalf("no digest of %s in %v", sharedRef, comp.Sources)
	}
	return w
}

// setFailed edits the stored "failed" Deployment (its record, sealed or not).
func (w *haltWorld) setFailed(t *testing.T, edit func(d *appsv1.Deployment)) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(w.failed), d); err != nil {
		t.Fatal(err)
	}
	edit(d)
	if err := w.c.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// gate asks the wave's rules about "waiting", which needs a rollout of the
// change: open when it may be stamped now.
func (w *haltWorld) gate(t *testing.T) (reconcile.Result, bool, error) {
	o := rollout.Observation{Key: rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "waiting"}, Kind: workload.NewRegistry().All()[0], Object: w.waiting,
		Ours: true, Need: rollout.NeedsRollout, Hash: "v1-new", Data: w.comp, Sources: map[stamp.ObjectRef]string{sharedRef: w.change.Content}}
	d, err := w.r.Scheduler.Decide(t.Context(), o)
	return reconcile.Result{RequeueAfter: d.After}, d.Transition == rollout.Stamp, err
}

// A workload waiting on a halted change asks again later even if the wake-up
// of the halt's lift is missed (the lift landed between its index read and
// its registration as a waiter): it is never left waiting for good.
func TestHaltedWorkloadAsksAgain(t *testing.T) {
	w := newHaltWorld(t, rollout.Policy{ProgressDeadline: time.Minute}, interceptor.Funcs{})
	w.setFailed(t, func(d *appsv1.Deployment) {
		withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false).Fail(true), testKeys.Current())
	})
	res, open, err := w.gate(t)
	if err != nil || open {
		t.Fatalf("gate = open %v, err %v; want halted", open, err)
	}
	if res.RequeueAfter <= 0 {
		t.Fatalf("a halted workload returns %+v: nothing would wake it if the lift's wake-up was missed", res)
	}
}

// Only a halt configstamp sealed holds a rollout, and only while what the
// failed workload references of the source is still the content that failed.
func TestHaltHoldsOnlyWhenSealedAndStillFailing(t *testing.T) {
	tests := map[string]struct {
		edit   func(w *haltWorld, d *appsv1.Deployment)
		fix    bool // the failed workload's part of the source is changed since
		halted bool
	}{
		"sealed halt, content still failing": {halted: true, edit: func(w *haltWorld, d *appsv1.Deployment) {
			withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false).Fail(true), testKeys.Current())
		}},
		"sealed halt, content fixed since": {fix: true, edit: func(w *haltWorld, d *appsv1.Deployment) {
			withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false).Fail(true), testKeys.Current())
		}},
		"sealed halt of another content": {edit: func(w *haltWorld, d *appsv1.Deployment) {
			other := rollout.Change{Ref: sharedRef, Content: "000000000000"}
			withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{other}, false).Fail(true), testKeys.Current())
		}},
		"hand-written halt (no seal)": {edit: func(w *haltWorld, d *appsv1.Deployment) {
			d.Annotations = map[string]string{rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationHalted: w.change.String()}
		}},
		"sealed halt copied from another workload": {edit: func(w *haltWorld, d *appsv1.Deployment) {
			other := withRecord(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid-other"}},
				rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false).Fail(true), testKeys.Current())
			d.Annotations = other.Annotations
		}},
		"halt removed by hand (resume)": {edit: func(w *haltWorld, d *appsv1.Deployment) {
			withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false).Fail(true), testKeys.Current())
			delete(d.Annotations, rollout.AnnotationHalted)
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newHaltWorld(t, rollout.Policy{ProgressDeadline: time.Minute}, interceptor.Funcs{})
			w.setFailed(t, func(d *appsv1.Deployment) { tc.edit(w, d) })
			if tc.fix {
				cm := &corev1.ConfigMap{}
				if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: sharedRef.Name}, cm); err != nil {
					t.Fatal(err)
				}
				cm.Data["k"] = "fixed"
				if err := w.c.Update(t.Context(), cm); err != nil {
					t.Fatal(err)
				}
			}
			_, open, err := w.gate(t)
			if err != nil || open == tc.halted {
				t.Fatalf("gate = open %v, err %v; want halted %v", open, err, tc.halted)
			}
		})
	}
}

// The only slot may be free because a rollout of this very change just
// failed: its close and its halt reach the cache in one update, which may land
// after gate's first look for a halt. gate looks again once the slot is its
// own, and gives the slot back.
func TestGateRechecksHaltAfterAcquire(t *testing.T) {
	var w *haltWorld
	closed := false
	funcs := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		o := &client.ListOptions{}
		o.ApplyOptions(opts)
		if !closed && o.FieldSelector != nil && strings.Contains(o.FieldSelector.String(), rollout.IndexRolling) {
			// The scheduler counts the slots: the failed rollout is closed,
			// with its halt, just before.
			closed = true
			d := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(w.failed), d); err != nil {
				return err
			}
			rec, err := rollout.Unseal(d, testKeys)
			if err != nil {
				return err
			}
			if err := c.Update(ctx, withRecord(d, rec.Fail(true), testKeys.Current())); err != nil {
				return err
			}
		}
		return c.List(ctx, list, opts...)
	}}
	w = newHaltWorld(t, rollout.Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, HaltOnFailure: true}, funcs)
	w.setFailed(t, func(d *appsv1.Deployment) {
		withRecord(d, rollout.StartRecord(time.Now(), []rollout.Change{w.change}, false), testKeys.Current())
	})
	_, open, err := w.gate(t)
	if !closed {
		t.Fatal("the scheduler never looked at the slots")
	}
	if err != nil || open {
		t.Fatalf("gate = open %v, err %v; want halted: the change failed while it waited for the slot", open, err)
	}
	if n, err := w.r.Scheduler.SlotsInUse(t.Context()); err != nil || n != 0 {
		t.Fatalf("slots in use %d (err %v): the slot taken for a halted rollout was not given back", n, err)
	}
}

// A reconcile that reads a workload the cache has not updated yet (its record
// closed by an earlier reconcile, or a newer rollout started since) must not
// close the record again: a rollout ends exactly once.
func TestStaleReadClosesNothing(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app", Generation: 1},
		Spec:   appsv1.DeploymentSpec{Replicas: new(int32(1))},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
	withRecord(d, rollout.StartRecord(time.Now().Add(-time.Minute), nil, false), testKeys.Current())
	c := fake.NewClientBuilder().WithObjects(d).Build()
	stale := d.DeepCopy()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), stale); err != nil {
		t.Fatal(err)
	}
	// Meanwhile a newer rollout started: the stored record is open again.
	fresh := stale.DeepCopy()
	withRecord(fresh, rollout.StartRecord(time.Now(), nil, false), testKeys.Current())
	if err := c.Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	r := &kindReconciler{Kind: workload.NewRegistry().All()[0], WorkloadReconciler: &WorkloadReconciler{Client: c, Recorder: events.NewFakeRecorder(10),
		Resolver:  &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
		Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Hour}, c, testKeys, nil)}}
	o := &rollout.Observation{Key: rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"}, Kind: workload.NewRegistry().All()[0], Object: stale}
	decision, err := r.Scheduler.Decide(t.Context(), *o)
	if err != nil || decision.Transition != rollout.CloseCompleted {
		t.Fatalf("Decide on the read = %+v, %v; want to close the completed rollout", decision, err)
	}
	res, err := r.act(t.Context(), o, decision)
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("closing from a stale read = %+v err %v; want to ask again", res, err)
	}
	stored := &appsv1.Deployment{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Annotations[rollout.AnnotationState]; got != string(rollout.Rolling) {
		t.Fatalf("the newer rollout's record was closed from a stale read: rollout-state %q", got)
	}
}

// When the webhook's consistent read corrects the reconciler's stamp to a
// third value (the cache one version behind: v1 → v2 proposed, v3 kept), the
// template did change: that is a rollout, reported like any other. Only a
// correction back to the stamp already there means nothing rolled.
func TestWebhookCorrectionToANewerHashIsARollout(t *testing.T) {
	for name, tc := range map[string]struct {
		kept    string
		rolled  bool
		dropped bool
	}{
		"corrected to a newer hash": {kept: "v1-third", rolled: true},
		"kept the current stamp":    {kept: "v1-first", rolled: false},
		// A CRD whose schema prunes the template's metadata: the patch
		// succeeds and the stamp is gone. Nothing can roll it; an event says so.
		"stamp pruned by the API server": {kept: "", dropped: true},
	} {
		t.Run(name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
					Annotations: map[string]string{stamp.AnnotationHash: "v1-first"}}}}}
			webhook := interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if err := c.Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				w := obj.(*appsv1.Deployment)
				w.Spec.Template.Annotations[stamp.AnnotationHash] = tc.kept
				if tc.kept == "" {
					delete(w.Spec.Template.Annotations, stamp.AnnotationHash)
				}
				return c.Update(ctx, w)
			}}
			c := fake.NewClientBuilder().WithObjects(d).WithInterceptorFuncs(webhook).Build()
			rec := events.NewFakeRecorder(10)
			r := &kindReconciler{Kind: workload.NewRegistry().All()[0], WorkloadReconciler: &WorkloadReconciler{Client: c, Recorder: rec,
				Resolver:  &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
				Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Hour}, c, testKeys, nil)}}
			obj := d.DeepCopy()
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), obj); err != nil {
				t.Fatal(err)
			}
			o := &rollout.Observation{Key: rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"}, Kind: workload.NewRegistry().All()[0], Object: obj}
			fields := o.Kind.TemplateFields()
			decision := rollout.Decision{Transition: rollout.Stamp,
				Patches: []rollout.Patch{{Meta: map[string]any{}, Spec: rollout.StampPatch(fields, "v1-second"), Judged: true}},
				Stamp: &rollout.StampWrite{Kind: "Deployment", TemplateFields: fields, Proposed: "v1-second", Previous: "v1-first",
					Causes: []rollout.Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "cfg"}, Content: "00aa"}}}}
			if res, err := r.act(t.Context(), o, decision); res.RequeueAfter != 0 || err != nil {
				t.Fatalf("act = %+v, %v; want the stamp written", res, err)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if tc.rolled && (len(got) != 1 || !strings.Contains(got[0], ReasonConfigChanged) || !strings.Contains(got[0], tc.kept)) {
				t.Fatalf("events %q: want one %s naming the stamp %s", got, ReasonConfigChanged, tc.kept)
			}
			if tc.dropped && (len(got) != 1 || !strings.Contains(got[0], ReasonStampDropped)) {
				t.Fatalf("events %q: want one %s", got, ReasonStampDropped)
			}
			if !tc.rolled && !tc.dropped && len(got) != 0 {
				t.Fatalf("events %q: nothing rolled, want none", got)
			}
		})
	}
}
