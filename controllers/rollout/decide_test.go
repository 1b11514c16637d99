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
	"github.com/configstamp/configstamp/controllers/workload"
)

// workloadIn is Deployment ns/name, one replica, complete or not, with rec
// sealed on it (nil: no record).
// deploymentKind is the kind of workloadIn's objects.
var deploymentKind = builtin(&appsv1.Deployment{})

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

// TestDecideStates walks Decide over the states where the scheduler's own
// state takes part (the gate: halt, debounce, budget; a slot freed), each
// with what it needs, and checks the one decision the reconciler acts on.
// The rules alone are TestRules'.
func TestDecideStates(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	deadline := time.Minute
	open := StartRecord(t0.Add(-10*time.Second), cause, false)
	notHalted := haltsFunc(func() string { return "" })
	halted := haltsFunc(func() string { return cause[0].String() })
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
		halted  HaltFinder
		want    Transition
		after   time.Duration // exact, or any > 0 when -1
		check   func(t *testing.T, d Decision)
	}{
		{name: "gone", obj: nil, want: Gone},
		{name: "rolling, complete: close", obj: workloadIn("w", true, &open), ours: true, want: CloseCompleted,
			check: func(t *testing.T, d Decision) {
				if d.Record.State != Completed || d.Failure != "" {
					t.Errorf("closed %+v failure %q, want complete", *d.Record, d.Failure)
				}
			}},
		{name: "rollout of a halted change", obj: workloadIn("w", true, nil), ours: true, need: NeedsRollout, halted: halted, want: Wait, after: haltedRecheck,
			check: func(t *testing.T, d Decision) {
				if d.Halted != cause[0].String() {
					t.Errorf("halted news %q, want %q", d.Halted, cause[0].String())
				}
			}},
		{name: "rollout in its debounce window", obj: workloadIn("w", true, nil), ours: true, need: NeedsRollout, window: 2 * time.Second, want: Wait, after: 2 * time.Second},
		{name: "rollout, a slot free", obj: workloadIn("w", true, nil), ours: true, need: NeedsRollout, want: Stamp,
			check: func(t *testing.T, d Decision) {
				if d.Record == nil || !d.Record.Open() || d.Record.Cause != FormatChanges(cause) || d.Supersedes {
					t.Errorf("stamp with record %+v supersedes %v, want a new open record of the change", d.Record, d.Supersedes)
				}
			}},
		{name: "rollout, the budget used by another", rolling: []client.Object{rollingDeployment("ns", "other", t0)},
			obj: workloadIn("w", true, nil), ours: true, need: NeedsRollout, want: Wait, after: -1},
		{name: "a change during its own rollout supersedes it, budget full or not", rolling: []client.Object{rollingDeployment("ns", "other", t0)},
			obj: workloadIn("w", false, &open), ours: true, need: NeedsRollout, want: Stamp,
			check: func(t *testing.T, d Decision) {
				if !d.Supersedes || d.Record == nil || !d.Record.Started.Equal(open.Started) || d.Record.Cause != FormatChanges(cause) {
					t.Errorf("stamp %+v: want it to supersede, its record of the new change started with the slot's first stamp", d)
				}
			}},
		{name: "rollout not followed (no budget, no halt): no record", policy: Policy{ProgressDeadline: deadline},
			obj: workloadIn("w", true, nil), ours: true, need: NeedsRollout, want: Stamp,
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
			s.Halts = tc.halted
			if tc.halted == nil {
				s.Halts = notHalted
			}
			o := Observation{Key: dep("w"), Kind: deploymentKind, Object: tc.obj, Ours: tc.ours, Need: tc.need, CacheBehind: tc.behind, Hash: "v1-new", Data: dataOf("v1-new"),
				Sources: sourcesOf(cause), Window: tc.window}
			d, err := s.Decide(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			if d.Transition != tc.want {
				t.Fatalf("verb %v, want %v (decision %+v)", d.Transition, tc.want, d)
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
	s.Halts = haltsFunc(func() string {
		if holds {
			return change
		}
		return ""
	})
	o := Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", true, nil), Ours: true, Need: NeedsRollout, Hash: "v1-new", Data: dataOf("v1-new")}
	for i, want := range []string{change, ""} {
		d, err := s.Decide(t.Context(), o)
		if err != nil || d.Transition != Wait || d.Halted != want {
			t.Fatalf("ask %d: %+v %v; want to wait, news %q", i+1, d, err, want)
		}
	}
	holds = false
	if d, err := s.Decide(t.Context(), o); err != nil || d.Transition != Stamp {
		t.Fatalf("after the lift: %+v %v; want to stamp", d, err)
	}
}

// haltsFunc is a HaltFinder whose answer is the function's.
type haltsFunc func() string

func (f haltsFunc) By(context.Context, string, []Change) (string, error) { return f(), nil }

func (f haltsFunc) Where(context.Context, []stamp.ObjectRef, func(string) bool) (string, error) {
	return f(), nil
}

// sourcesOf is what a workload references now, for a rollout of changes.
func sourcesOf(changes []Change) map[stamp.ObjectRef]string {
	out := map[stamp.ObjectRef]string{}
	for _, c := range changes {
		out[c.Ref] = c.Content
	}
	return out
}

// Once it granted a stamp, the scheduler does not grant the same workload
// another from a read that does not show that stamp (a cache behind this
// process's own write): it asks again shortly instead. Once the cache shows
// the rollout under way, the workload is followed.
func TestDecideNeverStampsTwice(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 2, ProgressDeadline: time.Minute, HaltOnFailure: true})
	o := Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", true, nil), Ours: true, Need: NeedsRollout, Hash: "v1-new", Data: dataOf("v1-new")}
	d, err := s.Decide(t.Context(), o)
	if err != nil || d.Transition != Stamp {
		t.Fatalf("first decision %+v, %v; want to stamp", d, err)
	}
	if d, err := s.Decide(t.Context(), o); err != nil || d.Transition != Stale || d.After != StaleRecheck {
		t.Fatalf("the same read again: %+v, %v; want to ask again after %v", d, err, StaleRecheck)
	}
	o.Object, o.Need = workloadIn("w", false, d.Record), NeedsNothing
	if d, err := s.Decide(t.Context(), o); err != nil || d.Transition != Follow || d.After <= StaleRecheck {
		t.Fatalf("the stamp seen: %+v, %v; want to follow the rollout by its deadline", d, err)
	}
}

// A change that supersedes a rollout under way keeps its slot only within
// the bound of the stamp that first took it (progress deadline + window +
// slotGrace): a tenant who changes its config again and again holds no slot
// past that, and its next change waits for a slot like any other.
func TestSupersedingKeepsTheSlotWithinItsBound(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	first := StartRecord(t0, []Change{{Ref: ref, Content: "00aa"}}, false)
	inCache := workloadIn("w", false, &first)
	policy := Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, VerifyWindow: 30 * time.Second, HaltOnFailure: true}
	s, c := newTestScheduler(t, policy, inCache)
	s.Halts = haltsFunc(func() string { return "" })
	// change: a new change of the source while the rollout under way, which
	// keeps progressing (its status moves), is open with rec.
	change := func(content string, rec Record) Observation {
		w := workloadIn("w", false, &rec)
		w.Status.UpdatedReplicas = int32(c.now().Sub(t0) / time.Second)
		return Observation{Key: dep("w"), Kind: deploymentKind, Object: w, Ours: true, Need: NeedsRollout, Hash: "v1-" + content, Data: dataOf("v1-" + content),
			Sources: map[stamp.ObjectRef]string{ref: content}}
	}

	c.advance(50 * time.Second)
	d, err := s.Decide(t.Context(), change("00bb", first))
	if err != nil || d.Transition != Stamp || !d.Supersedes || !d.Record.Started.Equal(t0) {
		t.Fatalf("within the bound: %+v %v; want a superseding stamp that keeps the first stamp's start", d, err)
	}
	if w, _ := s.Acquire(t.Context(), depIn("other", "a"), 0, true); w == 0 {
		t.Fatal("another namespace's workload got the slot the superseded rollout holds")
	}

	c.advance(time.Minute + 30*time.Second + slotGrace - 50*time.Second + time.Second) // just past t0 + deadline + window + grace
	if w, _ := s.Acquire(t.Context(), depIn("other", "a"), 0, true); w != 0 {
		t.Fatalf("past the bound of the first stamp the slot is still held (wait %v): a tenant starves the budget", w)
	}
	d, err = s.Decide(t.Context(), change("00cc", *d.Record))
	if err != nil || d.Transition != Wait || d.After <= 0 {
		t.Fatalf("past the bound, the budget full: %+v %v; want the new change to wait for a slot", d, err)
	}
}

// While a completed workload of the change has a pod that went unready
// (a suspect, its change still rolling), no other workload of the
// namespace takes a change of the same source: the crash may show a
// moment later, and the wave must not go on meanwhile.
func TestSuspectHoldsTheWave(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	done := StartRecord(t0.Add(-time.Minute), cause, false).Complete("v1-x")
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute, HaltOnFailure: true})
	s.Halts = haltsFunc(func() string { return "" })
	suspect := Observation{Key: dep("first"), Kind: deploymentKind, Object: workloadIn("first", true, &done), Ours: true,
		Verification: Verification{Read: true}}
	if _, err := s.Decide(t.Context(), suspect); err != nil {
		t.Fatal(err)
	}
	next := Observation{Key: dep("third"), Kind: deploymentKind, Object: workloadIn("third", true, nil), Ours: true, Need: NeedsRollout, Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause)}
	if d, err := s.Decide(t.Context(), next); err != nil || d.Transition != Wait || d.After <= 0 || d.After > time.Second {
		t.Fatalf("with a suspect of the change: %+v %v; want to wait a moment", d, err)
	}
	suspect.Verification.Healthy = true // Ready again: no longer a suspect
	if _, err := s.Decide(t.Context(), suspect); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Decide(t.Context(), next); err != nil || d.Transition != Stamp {
		t.Fatalf("the suspect Ready again: %+v %v; want to stamp", d, err)
	}
}

// dataOf is what a workload's data hashes to, for an observation that may
// be stamped or baselined: the hash, made with the test key.
func dataOf(hash string) *workload.Computation {
	return &workload.Computation{Result: stamp.Result{Hash: hash}, KeyID: testKeys.Current().KeyID(), Hasher: testKeys.Current()}
}

// A restart (a new leader) continues an open rollout's progress deadline
// from the last progress its pods show, not from its first look: a rollout
// stuck since 50 s of a one-minute deadline fails 10 s later, not a minute.
// With no pods read, it counts from the first look, as before.
func TestRestartKeepsTheProgressDeadline(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	open := StartRecord(t0.Add(-50*time.Second), cause, false)
	policy := Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, HaltOnFailure: true}
	stuck := func(v Verification) Observation {
		return Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", false, &open), Ours: true, Verification: v}
	}
	podMade := t0.Add(-49 * time.Second) // its one new pod, never Ready
	read := Verification{Read: true, Progressed: podMade}

	s, c := newTestScheduler(t, policy, workloadIn("w", false, &open))
	d, err := s.Decide(t.Context(), stuck(read))
	if err != nil || d.Transition != Follow {
		t.Fatalf("first look of a new leader, the pods' last progress 49 s ago: %+v %v; want it followed", d, err)
	}
	c.advance(12 * time.Second)
	if d, err := s.Decide(t.Context(), stuck(read)); err != nil || d.Transition != CloseFailed {
		t.Fatalf("12 s later, 61 s after its last progress: %+v %v; want it failed by the deadline", d, err)
	}

	s, c = newTestScheduler(t, policy, workloadIn("w", false, &open))
	if d, err := s.Decide(t.Context(), stuck(Verification{})); err != nil || d.Transition != Follow {
		t.Fatalf("first look, its pods not read: %+v %v; want it followed", d, err)
	}
	c.advance(12 * time.Second)
	if d, err := s.Decide(t.Context(), stuck(Verification{})); err != nil || d.Transition != Follow {
		t.Fatalf("12 s later, its pods not read: %+v %v; want it still followed (a full deadline from the first look)", d, err)
	}
}

// A suspect still not Ready holds its change for as long as a node may
// write the crash after the unready (workload.LateReadyMargin; a loaded
// test node wrote one 23 s late), not 15 s: test/realnode
// TestCrashAfterCompletionHaltsTheRestOfTheWave saw third stamped while
// first's crash was still unwritten. Judged again and again meanwhile (its
// polls), it still holds; a pod unready for good delays the wave by that
// margin, and never stops it.
func TestSuspectHoldsTheWaveWhileTheCrashMayBeWrittenLate(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	done := StartRecord(t0.Add(-time.Minute), cause, false).Complete("v1-x")
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute, HaltOnFailure: true})
	s.Halts = haltsFunc(func() string { return "" })
	suspect := Observation{Key: dep("first"), Kind: deploymentKind, Object: workloadIn("first", true, &done), Ours: true,
		Verification: Verification{Read: true}}
	next := Observation{Key: dep("third"), Kind: deploymentKind, Object: workloadIn("third", true, nil), Ours: true, Need: NeedsRollout, Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause)}
	for elapsed := time.Duration(0); elapsed < workload.LateReadyMargin; elapsed += 2 * time.Second {
		if _, err := s.Decide(t.Context(), suspect); err != nil { // its poll: still not Ready, no crash written yet
			t.Fatal(err)
		}
		if d, err := s.Decide(t.Context(), next); err != nil || d.Transition != Wait || d.After <= 0 {
			t.Fatalf("%v after the suspect's first look, still unready: %+v %v; want to wait", elapsed, d, err)
		}
		c.advance(2 * time.Second)
	}
	c.advance(time.Second) // past the margin: a pod unready for good stops no wave
	if _, err := s.Decide(t.Context(), suspect); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Decide(t.Context(), next); err != nil || d.Transition != Stamp {
		t.Fatalf("past the margin: %+v %v; want to stamp", d, err)
	}
	// Still unready at its next poll, it holds the wave no more: the margin
	// is spent once, not again for each workload after it.
	c.advance(2 * time.Second)
	if _, err := s.Decide(t.Context(), suspect); err != nil {
		t.Fatal(err)
	}
	fourth := next
	fourth.Key, fourth.Object = dep("fourth"), workloadIn("fourth", true, nil)
	if d, err := s.Decide(t.Context(), fourth); err != nil || d.Transition != Stamp {
		t.Fatalf("the suspect still unready %v past its margin: %+v %v; want the next workload stamped at once", 2*time.Second, d, err)
	}
}
