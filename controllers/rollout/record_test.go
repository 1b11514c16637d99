package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// apply merge-patches annotations as the API server would (nil deletes).
func apply(a map[string]string, patch map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v.(string)
		}
	}
	return out
}

// testKeys is the installation keyring of the tests of this package.
var testKeys = stamp.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))

// sealed writes r on obj as configstamp does (merge-patched, sealed with h
// for obj's UID) and returns obj.
func sealed[T client.Object](obj T, r Record, h *stamp.Hasher) T {
	obj.SetAnnotations(apply(obj.GetAnnotations(), r.Annotations(obj.GetUID(), h)))
	return obj
}

func TestTransitions(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	started := StartRecord(t0, cause, false)
	tests := map[string]struct {
		steps      []Record
		state      State
		open       bool
		halted     string
		startedSet bool
	}{
		"no record":                   {nil, None, false, "", false},
		"started":                     {[]Record{started}, Rolling, true, "", true},
		"started idle":                {[]Record{StartRecord(t0, cause, true)}, Idle, false, "", true},
		"idle, then making pods":      {[]Record{StartRecord(t0, cause, true).Unidle(t0.Add(time.Hour))}, Rolling, true, "", true},
		"completed":                   {[]Record{started, started.Complete("")}, Completed, false, "", true},
		"failed, halting":             {[]Record{started, started.Fail(true)}, Failed, false, "ConfigMap/shared@00aa", true},
		"failed, not halting":         {[]Record{started, started.Fail(false)}, Failed, false, "", true},
		"failed, then resumed":        {[]Record{started, started.Fail(true), started.Fail(true).Resume()}, Failed, false, "", true},
		"a new rollout clears a halt": {[]Record{started, started.Fail(true), StartRecord(t0, nil, false)}, Rolling, true, "", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app"}}
			for _, r := range tc.steps {
				sealed(obj, r, testKeys.Current())
			}
			r, err := Unseal(obj, testKeys)
			if err != nil {
				t.Fatalf("a record configstamp wrote does not verify: %v", err)
			}
			if r.State != tc.state || r.Open() != tc.open || r.Halted != tc.halted || r.Started.IsZero() == tc.startedSet {
				t.Fatalf("record %+v (open %v), want state %q open %v halted %q", r, r.Open(), tc.state, tc.open, tc.halted)
			}
			if len(tc.steps) > 0 && r.KeyID != testKeys.Current().KeyID() {
				t.Fatalf("record key id %q, want the key it was sealed with %q", r.KeyID, testKeys.Current().KeyID())
			}
			if r.Key() == nil && len(tc.steps) > 0 {
				t.Fatal("Unseal did not say which key the seal verified with")
			}
			if read := Read(obj.Annotations); read != withoutKey(r) {
				t.Fatalf("Read gives %+v, Unseal %+v: a sealed record reads the same either way", read, r)
			}
		})
	}
}

func TestReadOlderRecords(t *testing.T) {
	// configstamp before rollout-state left rollout-started on every workload
	// it ever rolled: such a record is over, never judged again.
	a := map[string]string{AnnotationStarted: time.Now().Add(-30 * 24 * time.Hour).Format(time.RFC3339), AnnotationCause: "ConfigMap/a@x"}
	r := Read(a)
	if r.Open() || r.State != None {
		t.Fatalf("a record without rollout-state reads as %+v; it must count as ended", r)
	}
	// Unsealed, it now counts for nothing at all.
	obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid", Annotations: a}}
	if r, err := Unseal(obj, testKeys); err == nil || r != (Record{}) {
		t.Fatalf("an unsealed older record verifies to %+v, %v; want nothing and an error", r, err)
	}
	if r := Read(map[string]string{AnnotationState: "bogus"}); r.State != None {
		t.Fatalf("an unknown state reads as %q", r.State)
	}
}

func TestChangesRoundTrip(t *testing.T) {
	in := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindSecret, Name: "b"}, Content: "absent"}, {Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "a"}, Content: "0011"}}
	got := ParseChanges(FormatChanges(in) + ",garbage,@x,ConfigMap/@y")
	if len(got) != 2 || got[0].String() != "ConfigMap/a@0011" || got[1].String() != "Secret/b@absent" {
		t.Fatalf("round trip: %v", got)
	}
}

// A record that has ended is never judged again: whatever happens to the
// workload afterwards (a scale, a node joining, an image bump) it holds no
// slot. Only an open record does, whatever the status says.
func TestEndedRecordsHoldNoSlot(t *testing.T) {
	disturbed := map[string]func(map[string]string) client.Object{
		"daemonset, a node joined, its pod unavailable": func(a map[string]string) client.Object {
			d := daemonSet(5, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 5, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 2, NumberUnavailable: 1})
			d.Annotations = a
			return d
		},
		"statefulset scaled 3 to 5": func(a map[string]string) client.Object {
			s := statefulSet(7, 5, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 7, ReadyReplicas: 3, UpdatedReplicas: 5, UpdateRevision: "b", CurrentRevision: "b"})
			s.Annotations = a
			return s
		},
		"deployment, image bumped, rolling": func(a map[string]string) client.Object {
			d := deployment(9, 3, appsv1.DeploymentStatus{ObservedGeneration: 8, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3})
			d.Annotations = a
			return d
		},
	}
	for name, mk := range disturbed {
		for state, holds := range map[State]bool{Completed: false, Failed: false, None: false, Rolling: true} {
			t.Run(name+"/"+string(state), func(t *testing.T) {
				obj := mk(nil)
				obj.SetUID("uid-" + types.UID(name))
				rec := Record{State: state, Started: t0, Cause: "ConfigMap/shared@00aa"}
				sealed(obj, rec, testKeys.Current())
				if got := len(IndexRollingFunc(obj)) > 0; got != holds {
					t.Fatalf("record %q: holds a slot = %v, want %v", state, got, holds)
				}
			})
		}
	}
}

// A halt written before rollout-state existed (the previous release recorded
// a failure as `halted` alone) used to read as a failed rollout. Unsealed
// records now count for nothing (a tenant could write one to halt a shared
// change everywhere): Read no longer makes it Failed, and it verifies to no
// record at all. The previous release's halts are taken over, sealed, by the
// Adopter instead.
func TestLegacyHaltCountsForNothing(t *testing.T) {
	a := map[string]string{AnnotationHalted: "ConfigMap/shared@00aa"}
	if r := Read(a); r.State != None || r.Open() {
		t.Fatalf("a legacy halt reads as %+v; want no state", r)
	}
	obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old", UID: "uid-old", Annotations: a}}
	if r, err := Unseal(obj, testKeys); err == nil || r != (Record{}) {
		t.Fatalf("a legacy halt verifies to %+v, %v; want nothing and an error", r, err)
	}
}

// Only a record configstamp wrote, on this very object, as it wrote it,
// counts (Unseal): a tenant who can edit its workloads cannot forge one, copy
// one from another workload, or alter one, to take or free slots or to halt
// a shared change.
func TestVerify(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	rolling := StartRecord(t0, cause, false)
	failed := rolling.Fail(true)
	oldKey, newKey := []byte("old-key-0123456789abcdef01234567"), []byte("new-key-0123456789abcdef01234567")
	unknown := stamp.NewHasher([]byte("someone-else-0123456789abcdef012"))

	tests := map[string]struct {
		rec Record
		// sealWith seals rec (nil: testKeys.Current()); keys verifies (nil: testKeys).
		sealWith func() *stamp.Hasher
		keys     func() *stamp.Keyring
		edit     func(obj *appsv1.Deployment)
		ok       bool
	}{
		"sealed":        {rec: rolling, ok: true},
		"sealed failed": {rec: failed, ok: true},
		"copied onto another object": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.UID = "uid-other" }},
		"state rolling to completed": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationState] = string(Completed) }},
		"started moved to 2099": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationStarted] = "2099-01-01T00:00:00Z" }},
		"cause changed": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationCause] = "ConfigMap/shared@00bb" }},
		"halted added": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationHalted] = "ConfigMap/shared@00aa" }},
		"halted changed": {rec: failed,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationHalted] = "ConfigMap/other@00aa" }},
		// The documented resume: removing halted voids the whole record.
		"halted removed from a failed record": {rec: failed,
			edit: func(o *appsv1.Deployment) { delete(o.Annotations, AnnotationHalted) }},
		"no seal, rolling": {rec: rolling,
			edit: func(o *appsv1.Deployment) { delete(o.Annotations, AnnotationSeal) }},
		"seal of another key id": {rec: rolling,
			edit: func(o *appsv1.Deployment) { o.Annotations[AnnotationSeal] = "000000000000.00" }},
		"sealed with a key since replaced": {rec: rolling, ok: true,
			sealWith: func() *stamp.Hasher { return stamp.NewHasher(oldKey) },
			keys: func() *stamp.Keyring {
				k := stamp.NewKeyring(oldKey)
				k.Set(newKey)
				return k
			}},
		"sealed with a persisted previous key": {rec: rolling, ok: true,
			sealWith: func() *stamp.Hasher { return stamp.NewHasher(oldKey) },
			keys: func() *stamp.Keyring {
				k := stamp.NewKeyring(newKey)
				k.AddPrevious(oldKey)
				return k
			}},
		"sealed with an unknown key": {rec: rolling,
			sealWith: func() *stamp.Hasher { return unknown }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, keys := testKeys.Current(), testKeys
			if tc.sealWith != nil {
				h = tc.sealWith()
			}
			if tc.keys != nil {
				keys = tc.keys()
			}
			obj := sealed(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app"}}, tc.rec, h)
			if tc.edit != nil {
				tc.edit(obj)
			}
			got, err := Unseal(obj, keys)
			if !tc.ok {
				if err == nil || got != (Record{}) {
					t.Fatalf("Unseal = %+v, %v; want the empty record and an error", got, err)
				}
				return
			}
			want := tc.rec
			want.KeyID = h.KeyID()
			if err != nil || withoutKey(got) != want || got.Key().KeyID() != h.KeyID() {
				t.Fatalf("Unseal = %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

// A workload configstamp never wrote a record on has none, and that is no error.
func TestVerifyNoRecord(t *testing.T) {
	for name, a := range map[string]map[string]string{"no annotations": nil, "other annotations": {"team": "a", AnnotationPriority: "3"}} {
		obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid", Annotations: a}}
		if r, err := Unseal(obj, testKeys); err != nil || r != (Record{}) {
			t.Errorf("%s: Unseal = %+v, %v; want the empty record, no error", name, r, err)
		}
	}
}

// withoutKey is r as Read gives it: without the key Unseal found.
func withoutKey(r Record) Record {
	r.key = nil
	return r
}

// The last verified revision is carried from rollout to rollout, kept by a
// failure, set only by a rollout that completed with something verified,
// and sealed: a tenant cannot point the undo at a revision of its choice.
func TestVerifiedRevision(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	good := StartRecord(t0, cause, false).Complete("v1-good")
	interim := good.StartRecord(t0.Add(time.Minute), cause, false) // superseded before it passed
	failed := interim.StartRecord(t0.Add(2*time.Minute), cause, false).Fail(true)
	for name, tc := range map[string]struct {
		rec  Record
		want string
	}{
		"verified":                 {good, "v1-good"},
		"a new rollout carries it": {interim, "v1-good"},
		"a failure after a superseded change keeps it":  {failed, "v1-good"},
		"nothing verified (OnDelete) keeps the earlier": {good.StartRecord(t0, cause, true).Complete(""), "v1-good"},
	} {
		t.Run(name, func(t *testing.T) {
			obj := sealed(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app"}}, tc.rec, testKeys.Current())
			r, err := Unseal(obj, testKeys)
			if err != nil || r.Verified != tc.want {
				t.Fatalf("verified %q (err %v), want %q", r.Verified, err, tc.want)
			}
			obj.Annotations[AnnotationVerified] = "v1-chosen-by-a-tenant"
			if _, err := Unseal(obj, testKeys); err == nil {
				t.Fatal("a record whose verified revision was changed by hand still verifies")
			}
		})
	}
}
