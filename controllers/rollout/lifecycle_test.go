package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// lifecycleCause is the change of every lifecycle fixture.
var lifecycleCause = []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}

// fixture is one situation Decide is asked about, on a scheduler with the
// policy (zero: a budget of one, halting), with what it finds halted.
type fixture struct {
	policy Policy
	halted string
	o      Observation
}

// observation is workload w (complete or not, with rec sealed on it; nil:
// none) as the reconciler would observe it: ours, needing need.
func observation(complete bool, rec *Record, need Need) Observation {
	return Observation{Key: dep("w"), Kind: deploymentKind, Object: workloadIn("w", complete, rec), Ours: true, Need: need,
		Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(lifecycleCause)}
}

// canaryObservation is a three-replica workload whose canary of the change,
// held at one new pod, rolls.
func canaryObservation(v Verification) Observation {
	hold := deploymentKind.Hold(threeReplicas("w", nil), 30*time.Second)
	rec := StartRecord(t0.Add(-time.Minute), lifecycleCause, false).AsCanary(hold.Encode())
	o := observation(true, nil, NeedsNothing)
	held := threeReplicas("w", &rec)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(held)
	if err != nil {
		panic(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(mergePatches(u, hold.SetPatch()), held); err != nil {
		panic(err)
	}
	o.Object, o.VerifyWindow, o.Verification = held, 30*time.Second, v
	return o
}

func (f fixture) decide(t *testing.T) Decision {
	t.Helper()
	policy := f.policy
	if policy == (Policy{}) {
		policy = Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, HaltOnFailure: true}
	}
	s, _ := newTestScheduler(t, policy)
	s.Halts = haltsFunc(func() string { return f.halted })
	d, err := s.Decide(t.Context(), f.o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lifecycleFixtures are a situation for each row of Lifecycle, in order.
func lifecycleFixtures() []fixture {
	open := StartRecord(t0.Add(-10*time.Second), lifecycleCause, false)
	late := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false)
	halting := late.Fail(true)
	done := open.Complete("v1-old")
	undoing := halting.StartUndo(t0.Add(-10*time.Second), "v1-old")
	idle := StartRecord(t0.Add(-time.Hour), lifecycleCause, true) // resumed since
	with := func(o Observation, edit func(o *Observation)) Observation { edit(&o); return o }
	window := 30 * time.Second
	return []fixture{
		{o: with(observation(true, nil, NeedsNothing), func(o *Observation) { o.Object = nil })},
		{o: with(observation(true, &halting, NeedsNothing), func(o *Observation) {
			o.Verification = Verification{Window: window, Read: true, Healthy: true, HealthySince: t0.Add(-time.Minute)}
		})},
		{o: with(observation(true, &done, NeedsNothing), func(o *Observation) {
			o.Verification = Verification{Read: true, Problem: "pod w-x: container app restarted 1 times"}
		})},
		{o: canaryObservation(Verification{Window: window, Read: true, Pods: 1, FirstHealthySince: t0.Add(-time.Minute)})},
		{o: canaryObservation(Verification{Window: window, Read: true, Pods: 1})},
		{o: canaryObservation(Verification{Read: true, Pods: 1})},
		{o: with(observation(true, &open, NeedsNothing), func(o *Observation) { o.Verification = Verification{Window: window, Read: true, Healthy: true} })},
		{o: observation(true, &open, NeedsNothing)},
		{o: with(observation(false, &open, NeedsNothing), func(o *Observation) {
			o.Verification = Verification{Read: true, Problem: "pod w-x: container app restarted 1 times"}
		})},
		{o: observation(true, &undoing, NeedsNothing)},
		{o: with(observation(false, &undoing, NeedsNothing), func(o *Observation) {
			o.Verification = Verification{Read: true, Problem: "pod w-x: container app restarted 1 times"}
		})},
		{o: observation(false, &open, NeedsNothing)},
		{o: observation(false, &open, NeedsRecord)},
		{o: optedOut()},
		{o: with(observation(false, &open, NeedsNothing), func(o *Observation) { o.Ours = false })},
		{o: with(observation(true, nil, NeedsNothing), func(o *Observation) { o.Ours = false })},
		{o: with(observation(true, nil, NeedsRollout), func(o *Observation) { o.CacheBehind = true })},
		{o: observation(true, &done, NeedsNothing)},
		{o: resumedByHand()},
		{o: observation(true, nil, NeedsRecord)},
		{o: observation(true, &idle, NeedsNothing)},
		{o: with(observation(true, nil, NeedsRollout), func(o *Observation) { o.Object.(*appsv1.Deployment).Spec.Paused = true })},
		{o: observation(true, nil, NeedsRollout)},
		{o: observation(true, nil, NeedsRollout), halted: FormatChanges(lifecycleCause)},
		{o: with(observation(true, nil, NeedsRollout), func(o *Observation) { o.Window = time.Second })},
	}
}

// optedOut is a failed canary, paused by configstamp and halting its
// change, whose workload then opted out.
func optedOut() Observation {
	hold := workload.Hold{{Path: "spec.paused", Set: true}}
	failed := StartRecord(t0.Add(-time.Minute), lifecycleCause, false).AsCanary(hold.Encode()).Fail(true)
	o := observation(true, &failed, NeedsNothing)
	o.Object.(*appsv1.Deployment).Spec.Paused = true
	o.Ours = false
	return o
}

// resumedByHand is a failed canary, paused by configstamp, whose halted
// annotation a user removed (kubectl configstamp resume): its record no
// longer sealed, the pause still set.
func resumedByHand() Observation {
	hold := workload.Hold{{Path: "spec.paused", Set: true}}
	failed := StartRecord(t0.Add(-time.Minute), lifecycleCause, false).AsCanary(hold.Encode()).Fail(true)
	o := observation(true, &failed, NeedsNothing)
	d := o.Object.(*appsv1.Deployment)
	d.Spec.Paused = true
	delete(d.Annotations, AnnotationHalted)
	return o
}

// TestLifecycle walks the lifecycle table: each row's situation is
// decided, and the decision must be that row's (its state, trigger and
// transition) with exactly the effects the row lists. A transition or an
// effect changed in Rules, the gate or effects and not in the table fails
// here. -v prints the table.
func TestLifecycle(t *testing.T) {
	fixtures := lifecycleFixtures()
	if len(fixtures) != len(Lifecycle) {
		t.Fatalf("%d fixtures for %d rows", len(fixtures), len(Lifecycle))
	}
	for i, row := range Lifecycle {
		t.Log(row)
		t.Run(fmt.Sprintf("%02d %s on %s", i, row.Transition, row.On), func(t *testing.T) {
			d := fixtures[i].decide(t)
			if !row.Applies(d.Judged.State, d.On, d.Transition) {
				t.Fatalf("decided %s on %s from %q: not this row (%s)", d.Transition, d.On, d.Judged.State, row)
			}
			if got := d.Summary(); got.String() != row.Effects.String() {
				t.Fatalf("effects %q, the table says %q", got, row.Effects)
			}
			if row.To != "" && (d.Record == nil || !strings.HasPrefix(row.To, string(d.Record.State))) {
				t.Fatalf("record written %+v, the table says %s", d.Record, row.To)
			}
		})
	}
}

// Every transition Decide can return has a row.
func TestLifecycleCoversEveryTransition(t *testing.T) {
	for tr := Wait; tr <= Unidle; tr++ {
		if tr == Gate { // Rules' answer only
			continue
		}
		if !slices.ContainsFunc(Lifecycle, func(r Row) bool { return r.Transition == tr }) {
			t.Errorf("no row of the lifecycle takes %s", tr)
		}
	}
}

// counted renders a decision's counts with their labels.
func counted(e Effects) []string {
	out := make([]string, len(e.Counts))
	for i, c := range e.Counts {
		out[i] = c.Metric + "{" + strings.Join(c.Labels, ",") + "}"
	}
	return out
}

// told renders a decision's events: type, reason, what they regard, message.
func told(e Effects) []string {
	out := make([]string, len(e.Events))
	for i, ev := range e.Events {
		about := "workload"
		if ev.Source != nil {
			about = ev.Source.String()
		}
		out[i] = ev.Type + " " + ev.Reason + " " + ev.Action + " (" + about + "): " + ev.Message
	}
	return out
}

// pinnedUndo is a pinned workload asking for undo, whose pods fail, whose failed template is
// stamped v1-bad and whose revision 4, stamped v1-good, passed verification.
func pinnedUndo(rec Record, edit func(tmpl *corev1.PodTemplateSpec)) Observation {
	o := observation(false, nil, NeedsNothing)
	d := o.Object.(*appsv1.Deployment)
	d.Spec.Template.Annotations = map[string]string{stamp.AnnotationHash: "v1-bad", pin.AnnotationPinned: "ConfigMap/shared-bad=shared"}
	sealed(d, rec, testKeys.Current())
	prev := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		stamp.AnnotationHash: "v1-good", pin.AnnotationPinned: "ConfigMap/shared-good=shared"}}}
	if edit != nil {
		edit(prev)
	}
	o.Undo = UndoFacts{Wanted: true, Pin: true, Revision: prev, Number: 4}
	o.Verification = Verification{Read: true, Problem: "pod w-x: container app restarted 1 times"}
	return o
}

// TestDecideEffects: per transition and its variants, the events (their
// texts), the counters (their labels) and the undo Decide names.
func TestDecideEffects(t *testing.T) {
	open := StartRecord(t0.Add(-10*time.Second), lifecycleCause, false)
	late := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false)
	verifying := late.StartVerifying(t0.Add(time.Minute))
	lateVerified := late
	lateVerified.Verified = "v1-good"
	wholeCanary := open.AsCanary("")
	lateCanary := late.AsCanary("")
	halting := late.Fail(true)
	failed := func(o Observation) Observation {
		o.Verification = Verification{Read: true, Problem: "pod w-x: container app restarted 1 times"}
		return o
	}
	noHalt := Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute}
	tests := map[string]struct {
		f      fixture
		want   Transition
		counts []string
		events []string // substrings, in order
		undo   bool
	}{
		"failed, halting: told on the workload and on its source": {f: fixture{o: failed(observation(false, &late, NeedsNothing))}, want: CloseFailed,
			counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"Warning RolloutFailed Halt (workload): rollout for ConfigMap/shared@00aa failed: its new pods failed: pod w-x: container app restarted 1 times; configstamp halts further rollouts",
				"Warning RolloutFailed Halt (ConfigMap/shared): this change made the rollout of Deployment w fail; its rollout to other workloads is halted"}},
		"failed, not halting": {f: fixture{policy: noHalt, o: failed(observation(false, &late, NeedsNothing))}, want: CloseFailed,
			counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"rollout for ConfigMap/shared@00aa failed: its new pods failed: pod w-x: container app restarted 1 times; configstamp does not halt other rollouts (--halt-on-failure=false)"}},
		"failed in its verification window": {f: fixture{o: failed(observation(true, &verifying, NeedsNothing))}, want: CloseFailed,
			counts: []string{MetricFailed + "{Deployment}", MetricFailedVerification + "{Deployment}"},
			events: []string{"failed: it failed verification: pod w-x", "(ConfigMap/shared)"}},
		"a canary failed": {f: fixture{o: failed(observation(false, &lateCanary, NeedsNothing))}, want: CloseFailed,
			counts: []string{MetricFailed + "{Deployment}", MetricCanaries + "{failed,Deployment}"},
			events: []string{"RolloutFailed", "RolloutFailed"}},
		"completed": {f: fixture{o: observation(true, &open, NeedsNothing)}, want: CloseCompleted,
			counts: []string{MetricCompleted + "{Deployment}"}},
		"a canary of the whole workload completed: it passed": {f: fixture{o: observation(true, &wholeCanary, NeedsNothing)}, want: CloseCompleted,
			counts: []string{MetricCanaries + "{passed,Deployment}", MetricCompleted + "{Deployment}"}},
		"a held canary passed": {f: fixture{o: canaryObservation(Verification{Window: 30 * time.Second, Read: true, Pods: 1, FirstHealthySince: t0.Add(-time.Minute)})},
			want: PassCanary, counts: []string{MetricCanaries + "{passed,Deployment}"},
			events: []string{"Normal CanaryPassed Canary (workload): the canary of ConfigMap/shared@00aa passed: its first new pod stayed healthy for 30s"}},
		"recovered: the halt lifted": {f: fixture{o: func() Observation {
			o := observation(true, &halting, NeedsNothing)
			o.Verification = Verification{Window: 30 * time.Second, Read: true, Healthy: true, HealthySince: t0.Add(-time.Minute)}
			return o
		}()}, want: Resume, events: []string{"Normal RolloutRecovered Resume (workload): the workload is complete again: the halt of  is lifted"}},
		"waits on a halted change": {f: fixture{o: observation(true, nil, NeedsRollout), halted: "ConfigMap/shared@00aa"}, want: Wait,
			events: []string{"Warning RolloutHalted Wait (workload): not rolling out: the change ConfigMap/shared@00aa failed on another workload"}},
		"stamps: what the write did tells": {f: fixture{o: observation(true, nil, NeedsRollout)}, want: Stamp},
		"failed, pinned, undo asked: undone to the verified revision": {f: fixture{o: pinnedUndo(lateVerified, nil)}, want: CloseFailed,
			counts: []string{MetricFailed + "{Deployment}"}, events: []string{"RolloutFailed", "RolloutFailed"}, undo: true},
		"failed, undo asked, an edit since the verified revision": {f: fixture{o: pinnedUndo(lateVerified, func(tmpl *corev1.PodTemplateSpec) {
			tmpl.Labels = map[string]string{"tier": "front"}
		})}, want: CloseFailed, counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"RolloutFailed", "RolloutFailed", "Warning UndoImpossible Undo (workload): configstamp.io/on-failure: undo is asked, but the pod template differs from revision 4 in more than configstamp's stamp and snapshots (its labels)"}},
		"failed, undo asked, nothing verified yet": {f: fixture{o: pinnedUndo(late, nil)}, want: CloseFailed, counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"RolloutFailed", "RolloutFailed", "no earlier revision of this workload passed configstamp's verification"}},
		"failed, undo asked, not pinned": {f: fixture{o: func() Observation {
			o := pinnedUndo(lateVerified, nil)
			o.Undo.Pin = false
			return o
		}()}, want: CloseFailed, counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"RolloutFailed", "RolloutFailed", "UndoImpossible Undo (workload): configstamp.io/on-failure: undo is asked, but the workload is not pinned"}},
		"failed, a bad on-failure value": {f: fixture{o: func() Observation {
			o := failed(observation(false, &late, NeedsNothing))
			o.Undo.Problems = []stamp.Problem{{Field: "annotation " + AnnotationOnFailure, Value: "sometimes", Message: "is neither"}}
			return o
		}()}, want: CloseFailed, counts: []string{MetricFailed + "{Deployment}"},
			events: []string{"RolloutFailed", "RolloutFailed", "Warning " + workload.ReasonInvalidValue + " Ignore (workload): annotation configstamp.io/on-failure"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := tc.f.decide(t)
			if d.Transition != tc.want {
				t.Fatalf("transition %s, want %s (%+v)", d.Transition, tc.want, d)
			}
			if got := counted(d.Effects); !slices.Equal(got, tc.counts) && (len(got) > 0 || len(tc.counts) > 0) {
				t.Errorf("counts %q, want %q", got, tc.counts)
			}
			got := told(d.Effects)
			if len(got) != len(tc.events) {
				t.Fatalf("events %q, want %d: %q", got, len(tc.events), tc.events)
			}
			for i, want := range tc.events {
				if !strings.Contains(got[i], want) {
					t.Errorf("event %d %q, want it to say %q", i, got[i], want)
				}
			}
			// The scheduler learns of a canary's pass (or of a close) only
			// once it is written: a write refused leaves the canary running.
			if reports := d.Transition == PassCanary || d.Transition.closes(); (d.Written != nil) != reports {
				t.Errorf("record to report once written %+v, want one: %v", d.Written, reports)
			}
			if (d.Undo != nil) != tc.undo {
				t.Errorf("undo %+v, want %v", d.Undo, tc.undo)
			}
		})
	}
}

// A stamp's effects depend on what the write left: the proposed stamp or a
// newer one rolled (ConfigChanged naming the stamp kept, one count); the
// old one kept rolled nothing; none at all was pruned (StampDropped).
func TestStampLanded(t *testing.T) {
	d := fixture{o: observation(true, nil, NeedsRollout)}.decide(t)
	if d.Transition != Stamp || d.Stamp == nil || !d.Release || len(d.Patches) != 1 || !d.Patches[0].Judged {
		t.Fatalf("decision %+v: want one patch on the judged version, its slot released if it does not land", d)
	}
	template := func(hash string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationHash: hash}}}
	}
	for name, tc := range map[string]struct {
		tmpl   *corev1.PodTemplateSpec
		rolled bool
		events []string
		counts []string
	}{
		"the proposed stamp": {template("v1-new"), true,
			[]string{"Normal ConfigChanged Rollout (workload): ConfigMap/shared changed: pod template stamped with configstamp.io/config-hash=v1-new"},
			[]string{MetricStarted + "{Deployment}"}},
		"a newer stamp, by the webhook": {template("v1-newer"), true, []string{"stamped with configstamp.io/config-hash=v1-newer"}, []string{MetricStarted + "{Deployment}"}},
		"the old stamp kept":            {template(""), false, []string{"Warning StampDropped Rollout"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			e, rolled, err := d.Stamp.Landed(tc.tmpl)
			if err != nil || rolled != tc.rolled {
				t.Fatalf("rolled %v (%v), want %v", rolled, err, tc.rolled)
			}
			got := told(e)
			if len(got) != len(tc.events) || (len(got) > 0 && !strings.Contains(got[0], tc.events[0])) {
				t.Fatalf("events %q, want %q", got, tc.events)
			}
			if c := counted(e); !slices.Equal(c, tc.counts) && (len(c) > 0 || len(tc.counts) > 0) {
				t.Fatalf("counts %q, want %q", c, tc.counts)
			}
		})
	}
}

// An undo's outcome: returned to the revision, or why not.
func TestUndoDone(t *testing.T) {
	lateVerified := StartRecord(t0.Add(-2*time.Minute), lifecycleCause, false)
	lateVerified.Verified = "v1-good"
	d := fixture{o: pinnedUndo(lateVerified, nil)}.decide(t)
	if d.Undo == nil || d.Undo.Revision != 4 || d.Undo.To.Annotations[stamp.AnnotationHash] != "v1-good" || d.Undo.Failed.Annotations[stamp.AnnotationHash] != "v1-bad" {
		t.Fatalf("undo %+v: want from v1-bad to revision 4, v1-good", d.Undo)
	}
	// Once returned, the undo's own rollout is followed: open, to v1-good,
	// the failure's halt kept.
	follow := Read(stringsOf(d.Undo.Follow.Meta))
	if follow.State != Rolling || follow.Undo != "v1-good" || follow.Halted != d.Record.Halted || follow.Canary != NoCanary {
		t.Fatalf("the undo's follow record %+v, want rolling to v1-good, halt %q kept", follow, d.Record.Halted)
	}
	for name, tc := range map[string]struct {
		err  error
		now  string
		want string
	}{
		"returned":          {nil, "v1-good", "Normal RolloutUndone Undo (workload): the rollout failed: the workload is returned to its revision 4 (stamp v1-good)"},
		"edited meanwhile":  {ErrEditedMeanwhile, "v1-bad", "Warning UndoImpossible Undo (workload): configstamp.io/on-failure: undo is asked, but the pod template was changed"},
		"the webhook kept":  {nil, "v1-bad", "the undo to revision 4 failed: the webhook kept the template stamped v1-bad"},
		"the write refused": {fmt.Errorf("forbidden"), "v1-bad", "the undo to revision 4 failed: forbidden"},
	} {
		t.Run(name, func(t *testing.T) {
			e, landed := d.Undo.Done(tc.err, &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationHash: tc.now}}}, false)
			got := told(e)
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("events %q, want one saying %q", got, tc.want)
			}
			if landed != (name == "returned") {
				t.Fatalf("landed %v: the undo's rollout is followed only when it was returned", landed)
			}
			if c := counted(e); landed && !slices.Equal(c, []string{MetricUndos + "{undone,Deployment}"}) {
				t.Fatalf("counts %q, want one undone", c)
			}
		})
	}
}

// stringsOf is a merge patch's annotations as they read once written.
func stringsOf(meta map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// Out of this installation's scope, a failed canary's hold and pause are
// left as they are, sealed or not: the namespace may be another
// installation's now, whose hold it is (two installations may share a
// key). Only a workload that opted out in scope gets its hold back.
func TestAHoldOutOfScopeIsLeftAlone(t *testing.T) {
	o := optedOut()
	o.Ours, o.OutOfScope = true, true
	if d := (fixture{o: o}).decide(t); d.Transition != Settle || len(d.Patches) != 0 {
		t.Fatalf("a held workload out of scope: %s with %d patches, want it settled untouched", d.Transition, len(d.Patches))
	}
}
