package controllers

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/hashkey"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

const (
	adoptSystemNS = "configstamp-system"
	adoptSecret   = "configstamp-hash-key"
)

// writes counts the writes a fake client is asked for.
type writes struct{ patches, updates, creates atomic.Int64 }

func (w *writes) total() int64 { return w.patches.Load() + w.updates.Load() + w.creates.Load() }

func (w *writes) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.patches.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.updates.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.creates.Add(1)
			return c.Create(ctx, obj, opts...)
		},
	}
}

// adoptWorld is a cluster upgraded from the release before seals: the
// ConfigMap "shared" of namespace "ns" is referenced by every Deployment, and
// the Deployments carry the records that release wrote.
type adoptWorld struct {
	c      client.WithWatch
	writes *writes
	a      *Adopter
	// digest is what the Deployments reference of "shared" now, key-precise
	// (the content id this release writes); legacy is the unkeyed-by-field
	// content id the previous release wrote for the same data.
	digest, legacy string
	hash           string // the stamp computed now
	tmpl           corev1.PodTemplateSpec
}

func newAdoptWorld(t *testing.T, secretAnnotations map[string]string, objs ...func(w *adoptWorld) client.Object) *adoptWorld {
	t.Helper()
	w := &adoptWorld{writes: &writes{}}
	w.tmpl = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: sharedRef.Name}}}}}}}
	shared := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: sharedRef.Name}, Data: map[string]string{"k": "broken"}}
	w.legacy = testKeys.Current().ContentID(stamp.SourceFromConfigMap(shared))

	base := []client.Object{shared,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: adoptSystemNS, Name: adoptSecret, Annotations: secretAnnotations},
			Data: map[string][]byte{hashkey.DataKey: testKeys.Key()}},
	}
	// The computation of the template needs only "shared": compute it first.
	pre := indexedBuilder(shared).Build()
	comp, err := (&workload.Resolver{Sources: pre, Index: pre, Keys: testKeys}).Compute(t.Context(), "ns", nil, &w.tmpl)
	if err != nil {
		t.Fatal(err)
	}
	w.digest, w.hash = comp.Sources[sharedRef], comp.Hash
	if w.digest == "" || w.digest == w.legacy {
		t.Fatalf("digest %q, legacy id %q: the test cannot tell them apart", w.digest, w.legacy)
	}
	for _, o := range objs {
		base = append(base, o(w))
	}
	w.c = indexedBuilder(base...).WithInterceptorFuncs(w.writes.funcs()).Build()
	scope, err := workload.NewScope(adoptSystemNS, nil, []string{"other"}, "")
	if err != nil {
		t.Fatal(err)
	}
	w.a = &Adopter{Client: w.c, Reader: w.c, Scope: scope,
		Resolver:  &workload.Resolver{Sources: w.c, Index: w.c, Keys: testKeys},
		KeySecret: hashkey.Secret{Namespace: adoptSystemNS, Name: adoptSecret}, Done: make(chan struct{})}
	return w
}

// legacyDeployment is a Deployment of namespace ns stamped with stampHash,
// carrying the unsealed record ann as the previous release wrote it.
func (w *adoptWorld) legacyDeployment(ns, name, stampHash string, ann map[string]string) *appsv1.Deployment {
	tmpl := *w.tmpl.DeepCopy()
	tmpl.Annotations = map[string]string{stamp.AnnotationHash: stampHash}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: appsv1.DeploymentSpec{Template: tmpl}}
}

func (w *adoptWorld) get(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (w *adoptWorld) start(t *testing.T) {
	t.Helper()
	if err := w.a.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case <-w.a.Done:
	default:
		t.Fatal("Start returned without closing Done: the reconcilers would wait for ever")
	}
}

var adoptStarted = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// The records of the previous release are sealed once, keeping their state
// and start time; their change ids become this release's digests only where
// the stamp shows the record is about the content referenced now.
func TestAdopterSealsLegacyRecords(t *testing.T) {
	started := adoptStarted.Format(time.RFC3339)
	var sealedBefore *appsv1.Deployment
	w := newAdoptWorld(t, nil,
		func(w *adoptWorld) client.Object { // failed and halted, data unchanged since
			return w.legacyDeployment("ns", "failed", w.hash, map[string]string{
				rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationStarted: started,
				rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy, rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		},
		func(w *adoptWorld) client.Object { // still rolling
			return w.legacyDeployment("ns", "rolling", w.hash, map[string]string{
				rollout.AnnotationState: string(rollout.Rolling), rollout.AnnotationStarted: started,
				rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy})
		},
		func(w *adoptWorld) client.Object { // halted, but its data changed since (the stamp is older)
			return w.legacyDeployment("ns", "changed", "v1-00000000000000000000000000000000", map[string]string{
				rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationStarted: started,
				rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy, rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		},
		func(w *adoptWorld) client.Object { // a halt from before rollout-state
			return w.legacyDeployment("ns", "stateless-halt", w.hash, map[string]string{
				rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		},
		func(w *adoptWorld) client.Object { // a rollout from before rollout-state
			return w.legacyDeployment("ns", "stateless", w.hash, map[string]string{
				rollout.AnnotationStarted: started, rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy})
		},
		func(w *adoptWorld) client.Object { // already sealed by this release
			d := withRecord(w.legacyDeployment("ns", "sealed", w.hash, nil),
				rollout.StartRecord(adoptStarted, []rollout.Change{{Ref: sharedRef, Content: w.digest}}, false).Fail(true), testKeys.Current())
			sealedBefore = d.DeepCopy()
			return d
		},
		func(w *adoptWorld) client.Object { // out of scope: another installation's
			return w.legacyDeployment("other", "outside", w.hash, map[string]string{
				rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationStarted: started,
				rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy, rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		},
	)
	outsideBefore := w.get(t, "other", "outside")
	sealedStored := w.get(t, "ns", "sealed")
	w.start(t)

	current := rollout.Change{Ref: sharedRef, Content: w.digest}.String()
	verify := func(t *testing.T, name string) (rollout.Record, *appsv1.Deployment) {
		t.Helper()
		d := w.get(t, "ns", name)
		rec, err := rollout.Unseal(d, testKeys)
		if err != nil {
			t.Fatalf("%s: the adopted record does not verify: %v (annotations %v)", name, err, d.Annotations)
		}
		for k, v := range d.Annotations {
			if strings.Contains(v, w.legacy) {
				t.Errorf("%s: annotation %s=%q keeps the previous release's id %s", name, k, v, w.legacy)
			}
		}
		return rec, d
	}

	t.Run("failed and halted, data unchanged", func(t *testing.T) {
		rec, d := verify(t, "failed")
		if rec.State != rollout.Failed || rec.Halted != current || rec.Cause != current || !rec.Started.Equal(adoptStarted) {
			t.Fatalf("record %+v, want failed since %v, halting %s", rec, adoptStarted, current)
		}
		if got := indexHalted(d); len(got) != 1 || got[0] != sharedRef.String() {
			t.Fatalf("indexed as halting %q, want [%s]", got, sharedRef)
		}
	})
	t.Run("rolling", func(t *testing.T) {
		rec, d := verify(t, "rolling")
		if rec.State != rollout.Rolling || !rec.Started.Equal(adoptStarted) || rec.Cause != current || rec.Halted != "" {
			t.Fatalf("record %+v, want rolling since %v for %s", rec, adoptStarted, current)
		}
		if got := rollout.IndexRollingFunc(d); len(got) != 1 {
			t.Fatalf("an adopted rollout under way holds no slot (indexed %q)", got)
		}
	})
	t.Run("halted, data changed since", func(t *testing.T) {
		rec, d := verify(t, "changed")
		if rec.Halted != "" || rec.Cause != "" || rec.State != rollout.Failed {
			t.Fatalf("record %+v: a halt whose content is no longer referenced must be dropped, the state kept", rec)
		}
		if got := indexHalted(d); len(got) != 0 {
			t.Fatalf("still indexed as halting %q", got)
		}
	})
	t.Run("halt from before rollout-state", func(t *testing.T) {
		rec, _ := verify(t, "stateless-halt")
		if rec.State != rollout.Failed || rec.Halted != current {
			t.Fatalf("record %+v, want failed halting %s", rec, current)
		}
	})
	t.Run("rollout from before rollout-state", func(t *testing.T) {
		rec, _ := verify(t, "stateless")
		if rec.State != rollout.Completed || rec.Halted != "" || !rec.Started.Equal(adoptStarted) {
			t.Fatalf("record %+v, want completed", rec)
		}
	})
	t.Run("already sealed", func(t *testing.T) {
		d := w.get(t, "ns", "sealed")
		if d.ResourceVersion != sealedStored.ResourceVersion || !maps.Equal(d.Annotations, sealedBefore.Annotations) {
			t.Fatalf("a sealed record was rewritten: %v, was %v", d.Annotations, sealedBefore.Annotations)
		}
	})
	t.Run("out of scope", func(t *testing.T) {
		d := w.get(t, "other", "outside")
		if d.ResourceVersion != outsideBefore.ResourceVersion || !maps.Equal(d.Annotations, outsideBefore.Annotations) {
			t.Fatalf("another installation's record was rewritten: %v", d.Annotations)
		}
	})
	t.Run("secret marked", func(t *testing.T) {
		s := &corev1.Secret{}
		if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: adoptSystemNS, Name: adoptSecret}, s); err != nil {
			t.Fatal(err)
		}
		if s.Annotations[hashkey.AnnotationRecordsSealed] == "" {
			t.Fatalf("secret annotations %v lack %s: the takeover would run again", s.Annotations, hashkey.AnnotationRecordsSealed)
		}
		if string(s.Data[hashkey.DataKey]) != string(testKeys.Key()) {
			t.Fatal("marking the secret changed its key")
		}
	})
}

// Once the Secret says the records are sealed, the takeover writes nothing
// (an unsealed record written later counts for nothing) and lets the
// reconcilers go at once.
func TestAdopterRunsOnce(t *testing.T) {
	w := newAdoptWorld(t, map[string]string{hashkey.AnnotationRecordsSealed: "true"},
		func(w *adoptWorld) client.Object {
			return w.legacyDeployment("ns", "forged", w.hash, map[string]string{
				rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		})
	w.start(t)
	if n := w.writes.total(); n != 0 {
		t.Fatalf("%d writes (%d patches, %d updates) with the secret already marked; want none", n, w.writes.patches.Load(), w.writes.updates.Load())
	}
	if d := w.get(t, "ns", "forged"); d.Annotations[rollout.AnnotationSeal] != "" {
		t.Fatalf("an unsealed record written after the takeover was sealed: %v", d.Annotations)
	}
}

// Until the records are taken over, a reconcile judges nothing and writes
// nothing: it asks again shortly.
func TestReconcileWaitsForAdoption(t *testing.T) {
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": "v"}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app",
		Labels: map[string]string{stamp.LabelEnabled: "true"}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}}}
	wr := &writes{}
	c := indexedBuilder(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, cfg, d).WithInterceptorFuncs(wr.funcs()).Build()
	adopted := make(chan struct{})
	r := &WorkloadReconciler{Client: c, Recorder: events.NewFakeRecorder(10),
		Resolver:  &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
		Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Minute}, c, testKeys, nil),
		Adopted:   adopted}
	req := rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"}
	res, err := r.Reconcile(t.Context(), req)
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("reconcile before the takeover = %+v, %v; want to ask again", res, err)
	}
	if n := wr.total(); n != 0 {
		t.Fatalf("%d writes before the records were taken over; want none", n)
	}
	// Once taken over the same reconcile writes (so the above says something).
	close(adopted)
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if wr.total() == 0 {
		t.Fatal("no write after the takeover either: the test proves nothing")
	}
}

// A workload whose patch the API server refuses is skipped (logged; its
// record counts for nothing), the others are taken over and the Secret is
// marked: one bad object never stops configstamp. A user's resume landing
// between the read and the patch is not undone: the patch is conditional on
// the version read, and a conflict starts again from a live read.
func TestAdopterSkipsRefusedAndKeepsAResume(t *testing.T) {
	started := adoptStarted.Format(time.RFC3339)
	halted := func(name string) func(w *adoptWorld) client.Object {
		return func(w *adoptWorld) client.Object {
			return w.legacyDeployment("ns", name, w.hash, map[string]string{
				rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationStarted: started,
				rollout.AnnotationCause: sharedRef.String() + "@" + w.legacy, rollout.AnnotationHalted: sharedRef.String() + "@" + w.legacy})
		}
	}
	w := newAdoptWorld(t, nil, halted("refused"), halted("resumed"), halted("plain"))
	resumed := false
	c := interceptor.NewClient(w.c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			switch obj.GetName() {
			case "refused":
				return apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "refused", errors.New("a policy says no"))
			case "resumed":
				if !resumed { // the user resumes just before configstamp's patch lands
					resumed = true
					live := &appsv1.Deployment{}
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
						return err
					}
					delete(live.Annotations, rollout.AnnotationHalted)
					if err := c.Update(ctx, live); err != nil {
						return err
					}
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	w.a.Client, w.a.Reader = c, c
	w.start(t)

	if d := w.get(t, "ns", "refused"); d.Annotations[rollout.AnnotationSeal] != "" {
		t.Fatalf("refused: sealed although its patch was refused: %v", d.Annotations)
	}
	if rec, err := rollout.Unseal(w.get(t, "ns", "plain"), testKeys); err != nil || rec.Halted == "" {
		t.Fatalf("plain: %+v, %v; want taken over, still halting, although another workload's patch was refused", rec, err)
	}
	rec, err := rollout.Unseal(w.get(t, "ns", "resumed"), testKeys)
	if !resumed || err != nil || rec.Halted != "" || rec.State != rollout.Failed {
		t.Fatalf("resumed: %+v, %v (resume simulated: %v); want sealed, failed, and the user's resume kept", rec, err, resumed)
	}
	s := &corev1.Secret{}
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: adoptSystemNS, Name: adoptSecret}, s); err != nil || s.Annotations[hashkey.AnnotationRecordsSealed] == "" {
		t.Fatalf("secret not marked (%v): %v", err, s.Annotations)
	}
}
