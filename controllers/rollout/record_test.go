package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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

func TestTransitions(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	tests := map[string]struct {
		steps      []map[string]any
		state      State
		open       bool
		halted     string
		startedSet bool
	}{
		"no record":                        {nil, None, false, "", false},
		"started":                          {[]map[string]any{StartRecord(t0, cause, false)}, Rolling, true, "", true},
		"started with nothing to wait for": {[]map[string]any{StartRecord(t0, cause, true)}, Completed, false, "", true},
		"completed":                        {[]map[string]any{StartRecord(t0, cause, false), CompleteRecord()}, Completed, false, "", true},
		"failed, halting":                  {[]map[string]any{StartRecord(t0, cause, false), FailRecord(Record{Cause: "ConfigMap/shared@00aa"}, true)}, Failed, false, "ConfigMap/shared@00aa", true},
		"failed, not halting":              {[]map[string]any{StartRecord(t0, cause, false), FailRecord(Record{Cause: "ConfigMap/shared@00aa"}, false)}, Failed, false, "", true},
		"failed, then resumed":             {[]map[string]any{StartRecord(t0, cause, false), FailRecord(Record{Cause: "ConfigMap/shared@00aa"}, true), ResumeRecord()}, Failed, false, "", true},
		"a new rollout clears a halt":      {[]map[string]any{StartRecord(t0, cause, false), FailRecord(Record{Cause: "ConfigMap/shared@00aa"}, true), StartRecord(t0, nil, false)}, Rolling, true, "", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := map[string]string{}
			for _, p := range tc.steps {
				a = apply(a, p)
			}
			r := Read(a)
			if r.State != tc.state || r.Open() != tc.open || r.Halted != tc.halted || r.Started.IsZero() == tc.startedSet {
				t.Fatalf("record %+v (open %v), want state %q open %v halted %q", r, r.Open(), tc.state, tc.open, tc.halted)
			}
		})
	}
}

func TestReadOlderRecords(t *testing.T) {
	// configstamp before rollout-state left rollout-started on every workload
	// it ever rolled: such a record is over, never judged again.
	r := Read(map[string]string{AnnotationStarted: time.Now().Add(-30 * 24 * time.Hour).Format(time.RFC3339), AnnotationCause: "ConfigMap/a@x"})
	if r.Open() || r.State != None {
		t.Fatalf("a record without rollout-state reads as %+v; it must count as ended", r)
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
				a := map[string]string{AnnotationStarted: t0.Format(time.RFC3339), AnnotationCause: "ConfigMap/shared@00aa"}
				if state != None {
					a[AnnotationState] = string(state)
				}
				if got := len(IndexRollingFunc(mk(a))) > 0; got != holds {
					t.Fatalf("record %q: holds a slot = %v, want %v", state, got, holds)
				}
			})
		}
	}
}

// A halt written before rollout-state existed (the previous release recorded
// a failure as `halted` alone) reads as a failed rollout, so that its
// recovery lifts it like any other.
func TestReadOlderHalt(t *testing.T) {
	if r := Read(map[string]string{AnnotationHalted: "ConfigMap/shared@00aa"}); r.State != Failed || r.Open() {
		t.Fatalf("an older halt reads as %+v; want a closed, failed record", r)
	}
}
