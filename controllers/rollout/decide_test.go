package rollout

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// workloadIn is Deployment ns/name, one replica, complete or not, with rec
// sealed on it (nil: no record).
func workloadIn(name string, complete bool, rec *Record) *appsv1.Deployment {
	one := int32(1)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 2},
		Spec: appsv1.DeploymentSpec{Replicas: &one}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1}}
	if complete {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
	}
	if rec != nil {
		sealed(d, *rec, testKeys.Current())
	}
	return d
}

// TestDecideStates walks Decide over the states a workload can be in, each
// with what it needs, and checks the one decision the reconciler acts on.
func TestDecideStates(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	deadline := time.Minute
	open := StartRecord(t0.Add(-10*time.Second), cause, false)
	late := StartRecord(t0.Add(-2*deadline), cause, false)
	failed := late.Fail(true)
	notHalted := func(context.Context) (string, error) { return "", nil }
	halted := func(context.Context) (string, error) { return cause[0].String(), nil }
	budget := Policy{MaxConcurrent: 1, ProgressDeadline: deadline, HaltOnFailure: true}

	tests := []struct {
		name    string
		policy  Policy
		rolling []client.Object // others holding slots
		obj     client.Object   // nil: gone
		ours    bool
		need    Need
		behind  bool
		window  time.Duration
		halted  func(context.Context) (string, error)
		want    Verb
		after   time.Duration // exact, or any > 0 when -1
		check   func(t *testing.T, d Decision)
	}{
		{name: "gone", obj: nil, want: Idle},
		{name: "failed, halting, complete again: resume", obj: workloadIn("w", true, &failed), ours: true, want: Resume,
			check: func(t *testing.T, d Decision) {
				if d.Record.Halted != "" || d.Record.State != Failed {
					t.Errorf("resumed record %+v, want failed without a halt", *d.Record)
				}
			}},
		{name: "failed, halting, still broken: its halt stands", obj: workloadIn("w", false, &failed), ours: true, need: NeedNothing, want: Idle},
		{name: "rolling, complete: close", obj: workloadIn("w", true, &open), ours: true, want: Close,
			check: func(t *testing.T, d Decision) {
				if d.Record.State != Completed || d.Failure != "" {
					t.Errorf("closed %+v failure %q, want complete", *d.Record, d.Failure)
				}
			}},
		{name: "rolling past its deadline: close as failed, halting its change", obj: workloadIn("w", false, &late), ours: true, want: Close,
			check: func(t *testing.T, d Decision) {
				if d.Record.State != Failed || d.Record.Halted != FormatChanges(cause) || d.Failure == "" {
					t.Errorf("closed %+v failure %q, want failed and halting %s", *d.Record, d.Failure, FormatChanges(cause))
				}
			}},
		{name: "rolling, not ours: follow it by its deadline", obj: workloadIn("w", false, &open), want: Idle, after: 51 * time.Second},
		{name: "rolling, nothing new: follow it", obj: workloadIn("w", false, &open), ours: true, need: NeedRecord, want: Idle, after: 51 * time.Second},
		{name: "not ours", obj: workloadIn("w", true, nil), want: Idle},
		{name: "cache behind its record", obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, behind: true, want: Idle, after: staleRecheck},
		{name: "up to date", obj: workloadIn("w", true, nil), ours: true, need: NeedNothing, want: Idle},
		{name: "record only", obj: workloadIn("w", true, nil), ours: true, need: NeedRecord, want: Baseline},
		{name: "rollout of a halted change", obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, halted: halted, want: Idle, after: haltedRecheck,
			check: func(t *testing.T, d Decision) {
				if d.Halted != cause[0].String() {
					t.Errorf("halted news %q, want %q", d.Halted, cause[0].String())
				}
			}},
		{name: "rollout in its debounce window", obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, window: 2 * time.Second, want: Idle, after: 2 * time.Second},
		{name: "rollout, a slot free", obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, want: Stamp,
			check: func(t *testing.T, d Decision) {
				if d.Record == nil || !d.Record.Open() || d.Record.Cause != FormatChanges(cause) || d.Supersedes {
					t.Errorf("stamp with record %+v supersedes %v, want a new open record of the change", d.Record, d.Supersedes)
				}
			}},
		{name: "rollout, the budget used by another", rolling: []client.Object{rollingDeployment("ns", "other", t0)},
			obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, want: Idle, after: -1},
		{name: "a change during its own rollout supersedes it, budget full or not", rolling: []client.Object{rollingDeployment("ns", "other", t0)},
			obj: workloadIn("w", false, &open), ours: true, need: NeedRollout, want: Stamp,
			check: func(t *testing.T, d Decision) {
				if !d.Supersedes || d.Record == nil || !d.Record.Started.Equal(t0) {
					t.Errorf("stamp %+v: want it to supersede, its record restarted now", d)
				}
			}},
		{name: "rollout not followed (no budget, no halt): no record", policy: Policy{ProgressDeadline: deadline},
			obj: workloadIn("w", true, nil), ours: true, need: NeedRollout, want: Stamp,
			check: func(t *testing.T, d Decision) {
				if d.Record != nil {
					t.Errorf("record %+v written although nothing follows rollouts", *d.Record)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == (Policy{}) {
				policy = budget
			}
			s, _ := newTestScheduler(t, policy, tc.rolling...)
			if tc.halted == nil {
				tc.halted = notHalted
			}
			o := Observation{Key: dep("w"), Ours: tc.ours, Need: tc.need, CacheBehind: tc.behind, Hash: "v1-new",
				Causes: cause, Window: tc.window, Halted: tc.halted}
			if tc.obj != nil {
				o.Object = tc.obj
				o.Record, _ = Verify(tc.obj, testKeys)
			}
			d, err := s.Decide(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verb != tc.want {
				t.Fatalf("verb %v, want %v (decision %+v)", d.Verb, tc.want, d)
			}
			if (tc.after == -1 && d.After <= 0) || (tc.after >= 0 && d.After != tc.after) {
				t.Errorf("ask again after %v, want %v", d.After, tc.after)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// A workload is told once that it waits on a halted change; asked again, it
// waits without news; once the halt is gone it rolls.
func TestDecideHaltedNewsOnce(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, HaltOnFailure: true})
	change := "ConfigMap/shared@00aa"
	holds := true
	o := Observation{Key: dep("w"), Object: workloadIn("w", true, nil), Ours: true, Need: NeedRollout, Hash: "v1-new",
		Halted: func(context.Context) (string, error) {
			if holds {
				return change, nil
			}
			return "", nil
		}}
	for i, want := range []string{change, ""} {
		d, err := s.Decide(t.Context(), o)
		if err != nil || d.Verb != Idle || d.Halted != want {
			t.Fatalf("ask %d: %+v %v; want to wait, news %q", i+1, d, err, want)
		}
	}
	holds = false
	if d, err := s.Decide(t.Context(), o); err != nil || d.Verb != Stamp {
		t.Fatalf("after the lift: %+v %v; want to stamp", d, err)
	}
}
