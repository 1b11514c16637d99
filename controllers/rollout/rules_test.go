package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// TestRules walks the wave's rules over the states a workload's record can be
// in (none, open, completed, failed and halting), what it is and needs, and
// what this process knows of it, and checks the step that applies and the
// record transition it writes. Rules is pure: no scheduler, no cache.
func TestRules(t *testing.T) {
	deadline := time.Minute
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	open := StartRecord(t0.Add(-10*time.Second), cause, false)
	late := StartRecord(t0.Add(-2*deadline), cause, false)
	halting := late.Fail(true)
	done := open.Complete("")
	halt := Policy{MaxConcurrent: 1, ProgressDeadline: deadline, HaltOnFailure: true}
	noHalt := Policy{MaxConcurrent: 1, ProgressDeadline: deadline}

	tests := []struct {
		name     string
		policy   Policy // zero: halt
		complete bool
		record   *Record
		gone     bool
		ours     bool
		outside  bool // out of this installation's scope
		need     Need
		behind   bool
		stamping bool
		want     Transition
		after    time.Duration
		// written: the record the step writes (nil: none)
		written *Record
		failure bool
	}{
		{name: "gone", gone: true, want: Gone},
		{name: "gone while rolling", gone: true, record: &open, want: Gone},
		{name: "failed, halting, complete again: resume", complete: true, record: &halting, ours: true, want: Resume,
			written: &Record{State: Failed, Started: halting.Started, Cause: halting.Cause}},
		{name: "failed, halting, still broken: its halt stands", record: &halting, ours: true, want: Settle},
		{name: "failed, halting, complete, not ours: still resumes", complete: true, record: &halting, want: Resume,
			written: &Record{State: Failed, Started: halting.Started, Cause: halting.Cause}},
		{name: "rolling, complete: close as completed", complete: true, record: &open, ours: true, want: CloseCompleted,
			written: &Record{State: Completed, Started: open.Started, Cause: open.Cause}},
		{name: "rolling, complete, not ours: still closed", complete: true, record: &open, want: CloseCompleted,
			written: &Record{State: Completed, Started: open.Started, Cause: open.Cause}},
		{name: "rolling past its deadline: close as failed, halting its change", record: &late, ours: true, want: CloseFailed,
			written: &Record{State: Failed, Started: late.Started, Cause: late.Cause, Halted: late.Cause}, failure: true},
		{name: "rolling past its deadline, halting off: close as failed only", policy: noHalt, record: &late, ours: true, want: CloseFailed,
			written: &Record{State: Failed, Started: late.Started, Cause: late.Cause}, failure: true},
		{name: "rolling, not ours: follow it by its deadline and its pods' poll", record: &open, want: Follow, after: PodPollMin},
		// Another installation's workload whose record this one can read
		// (the same hash key): never judged, closed, resumed or followed.
		{name: "rolling, complete, out of scope: left to its installation", complete: true, record: &open, outside: true, want: Settle},
		{name: "rolling past its deadline, out of scope: left to its installation", record: &late, outside: true, want: Settle},
		{name: "rolling, out of scope: holds no slot", record: &open, outside: true, want: Settle},
		{name: "failed, halting, complete, out of scope: its halt is not lifted here", complete: true, record: &halting, outside: true, want: Settle},
		{name: "rolling, nothing new: follow it", record: &open, ours: true, need: NeedsRecord, want: Follow, after: PodPollMin},
		{name: "rolling, up to date: follow it", record: &open, ours: true, need: NeedsNothing, want: Follow, after: PodPollMin},
		{name: "rolling, a new change: gate it, to supersede", record: &open, ours: true, need: NeedsRollout, want: Gate, after: PodPollMin},
		{name: "rolling and stamped by this process, a new change: gate it", record: &open, ours: true, need: NeedsRollout, stamping: true,
			want: Gate, after: PodPollMin},
		{name: "completed, not ours", complete: true, record: &done, want: Settle},
		{name: "no record, not ours", complete: true, want: Settle},
		{name: "cache behind its record", complete: true, ours: true, need: NeedsRollout, behind: true, want: Stale, after: StaleRecheck},
		{name: "stamped by this process, the cache shows no rollout", complete: true, ours: true, need: NeedsRollout, stamping: true,
			want: Stale, after: StaleRecheck},
		{name: "completed, up to date", complete: true, record: &done, ours: true, need: NeedsNothing, want: Settle},
		{name: "record only", complete: true, ours: true, need: NeedsRecord, want: Baseline},
		{name: "completed, a new change: gate it", complete: true, record: &done, ours: true, need: NeedsRollout, want: Gate},
		{name: "failed and halting, a new change, still broken: gate it", record: &halting, ours: true, need: NeedsRollout, want: Gate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == (Policy{}) {
				policy = halt
			}
			sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Ours: tc.ours, Need: tc.need,
				CacheBehind: tc.behind, OutOfScope: tc.outside}, Now: t0, Stamping: tc.stamping}
			if !tc.gone {
				sit.Object = workloadIn("w", tc.complete, nil)
			}
			if tc.record != nil {
				sit.Record = *tc.record
			}
			p := Rules(sit, policy)
			if p.Transition != tc.want || p.After != tc.after {
				t.Fatalf("step %v after %v, want %v after %v (plan %+v)", p.Transition, p.After, tc.want, tc.after, p)
			}
			switch {
			case tc.written == nil && p.Record != nil:
				t.Errorf("writes %+v, want no record", *p.Record)
			case tc.written != nil && (p.Record == nil || *p.Record != *tc.written):
				t.Errorf("writes %+v, want %+v", p.Record, *tc.written)
			}
			if (p.Failure != "") != tc.failure {
				t.Errorf("failure %q, want one: %v", p.Failure, tc.failure)
			}
		})
	}
}

// A pinned workload a user rolled back to an earlier revision's snapshots
// runs other data than the change that failed on it: complete, it recovers
// nothing, and its halt stands.
func TestRulesRolledBackRecoversNothing(t *testing.T) {
	halting := StartRecord(t0.Add(-2*time.Minute), []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}, false).Fail(true)
	w := workloadIn("w", true, nil)
	w.Spec.Template.Annotations = map[string]string{stamp.AnnotationHash: "v1-old"}
	w.Annotations = map[string]string{pin.AnnotationRolledBack: "v1-old"}
	sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Object: w, Ours: true}, Record: halting, Now: t0}
	if p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}); p.Transition != Settle {
		t.Fatalf("step %v, want %v: a rolled-back workload keeps the halt", p.Transition, Settle)
	}
	delete(w.Annotations, pin.AnnotationRolledBack)
	if p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}); p.Transition != Resume {
		t.Fatalf("step %v, want %v once it runs what failed again", p.Transition, Resume)
	}
}

// A halt lifts on health that lasts a full window, never on one Ready read:
// a flapping readiness probe that is Ready at the moment of a read keeps
// its halt, and is asked again when its health would have lasted.
func TestRulesHaltLiftsOnLastingHealth(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	halting := StartRecord(t0.Add(-2*time.Minute), cause, false).Fail(true)
	window := 30 * time.Second
	tests := map[string]struct {
		v       Verification
		want    Transition
		recheck time.Duration
	}{
		"Ready for 10 s of a 30 s window: halt stands, asked again at its end": {Verification{Window: window, Read: true, Healthy: true, HealthySince: t0.Add(-10 * time.Second)},
			Settle, 20*time.Second + 100*time.Millisecond},
		"Ready for the whole window: resume":                {Verification{Window: window, Read: true, Healthy: true, HealthySince: t0.Add(-31 * time.Second)}, Resume, 0},
		"not Ready now: halt stands":                        {Verification{Window: window, Read: true}, Settle, 0},
		"a restart seen: halt stands":                       {Verification{Window: window, Read: true, Healthy: true, Problem: "pod a: container app restarted 1 times"}, Settle, 0},
		"pods unread (an API error): stands":                {Verification{Window: window, Unread: true}, Settle, 0},
		"pods not listable (RBAC): as before":               {Verification{Window: window}, Resume, 0},
		"no window (--verify-window=0): as soon as healthy": {Verification{Read: true, Healthy: true, HealthySince: t0}, Resume, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Object: workloadIn("w", true, nil), Ours: true,
				Verification: tc.v}, Record: halting, Now: t0}
			p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true})
			if p.Transition != tc.want || p.Recheck != tc.recheck {
				t.Fatalf("step %v recheck %v, want %v recheck %v", p.Transition, p.Recheck, tc.want, tc.recheck)
			}
		})
	}
}

// While its change still rolls elsewhere, a completed workload that crashes
// (its pods are read then, RuleCrashing) fails, halting the rest.
func TestRulesCompletedThatCrashesWhileItsChangeRolls(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	done := StartRecord(t0.Add(-time.Minute), cause, false).Complete("")
	sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Object: workloadIn("w", true, nil), Ours: true,
		Verification: Verification{Read: true, Problem: "pod a: container app restarted 1 times (exit code 1, Error)"}}, Record: done, Now: t0}
	p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true})
	if p.Transition != CloseFailed || p.Record == nil || p.Record.State != Failed || p.Record.Halted != done.Cause || !strings.Contains(p.Failure, "still rolls") {
		t.Fatalf("plan %+v: want the completed rollout failed, halting its change", p)
	}
	sit.Verification = Verification{}
	if p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}); p.Transition != Settle {
		t.Fatalf("step %v, want %v: without a crash read, a completed rollout stays completed", p.Transition, Settle)
	}
}

// A crash loop whose runs outlast the window (a crash 20 s after each start,
// a 10 s window) never lifts its halt between two crashes: its health must
// outlast twice the longest run before a crash.
func TestRulesCrashLoopOutlastingTheWindowKeepsItsHalt(t *testing.T) {
	halting := StartRecord(t0.Add(-2*time.Minute), []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}, false).Fail(true)
	v := Verification{Window: 10 * time.Second, Read: true, Healthy: true, HealthySince: t0.Add(-15 * time.Second), Outlast: 40 * time.Second}
	sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Object: workloadIn("w", true, nil), Ours: true,
		Verification: v}, Record: halting, Now: t0}
	p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true})
	if p.Transition == Resume || p.Recheck != 25*time.Second+100*time.Millisecond {
		t.Fatalf("plan %+v: want the halt kept, asked again when its health outlasted 40 s", p)
	}
}

// A completed workload whose pod went unready while its change still rolls
// elsewhere is looked at again at the next poll: the crash may show only
// after its readiness probe said so.
func TestRulesCompletedUnreadyIsLookedAtAgain(t *testing.T) {
	done := StartRecord(t0.Add(-time.Minute), []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}, false).Complete("v1-x")
	sit := Situation{Observation: Observation{Key: dep("w"), Kind: workload.NewRegistry().All()[0], Object: workloadIn("w", true, nil), Ours: true,
		Verification: Verification{Read: true}}, Record: done, Now: t0}
	if p := Rules(sit, Policy{ProgressDeadline: time.Minute, HaltOnFailure: true}); p.Transition != Settle || p.Recheck != PodPollMin {
		t.Fatalf("plan %+v: want it asked again after %v", p, PodPollMin)
	}
}
