package rollout

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// threeReplicas is workloadIn with three replicas (a canary holds it at one).
func threeReplicas(name string, rec *Record) *appsv1.Deployment {
	d := workloadIn(name, true, nil)
	three := int32(3)
	d.Spec.Replicas = &three
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 3, 3, 3
	if rec != nil {
		sealed(d, *rec, testKeys.Current())
	}
	return d
}

// A change shared by six workloads, with a budget of ten: the first in wave
// order is its canary, held at one new pod; none of the others is stamped
// until that pod stayed healthy for the window; then they all roll, with no
// canary of their own.
func TestCanaryHoldsTheWaveWhateverTheBudget(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	wants := func(name string) Observation {
		return Observation{Key: dep(name), Kind: deploymentKind, Object: threeReplicas(name, nil), Ours: true, Need: NeedsRollout,
			Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), Canary: true, VerifyWindow: 30 * time.Second}
	}
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names { // the change's event announces them all (the mapper)
		s.Announce(dep(n), 0, ref)
	}
	for _, n := range names[1:] { // the others ask first: a comes first in the wave all the same
		if d, err := s.Decide(t.Context(), wants(n)); err != nil || d.Transition == Stamp {
			t.Fatalf("%s before the canary: %+v %v; want it to wait for a's canary", n, d, err)
		}
	}
	d, err := s.Decide(t.Context(), wants("a"))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning || len(d.Hold) == 0 || d.Record.Hold != d.Hold.Encode() {
		t.Fatalf("a: %+v %v; want a canary stamp with its hold", d, err)
	}
	waiting := func() {
		for _, n := range names[1:] { // each asks again at its recheck
			if d, err := s.Decide(t.Context(), wants(n)); err != nil || d.Transition == Stamp || d.After <= 0 || d.After > canaryWait {
				t.Fatalf("%s while the canary runs: %+v %v; want it to wait, and ask again soon", n, d, err)
			}
		}
	}
	waiting()

	// One new pod, healthy for 20 s: not yet; for 30 s: passed.
	c.advance(10 * time.Second)
	waiting()
	rec := *d.Record
	canary := Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", &rec), Ours: true, Need: NeedsNothing, Canary: true,
		VerifyWindow: 30 * time.Second, Verification: Verification{Read: true, Healthy: true, Pods: 1, HealthySince: c.now().Add(-20 * time.Second), FirstHealthySince: c.now().Add(-20 * time.Second)}}
	canary.Object.(*appsv1.Deployment).Status.UpdatedReplicas = 1
	if d, err := s.Decide(t.Context(), canary); err != nil || d.Transition != Follow || d.After <= 0 || d.After > 10*time.Second+time.Second {
		t.Fatalf("canary healthy for 20 s of 30: %+v %v; want to look again when the window ends", d, err)
	}
	waiting()
	c.advance(10 * time.Second)
	waiting()
	pass, err := s.Decide(t.Context(), canary)
	if err != nil || pass.Transition != PassCanary || pass.Record.Canary != CanaryPassed || pass.Record.Hold != "" || pass.Record.State != Rolling {
		t.Fatalf("canary healthy for the window: %+v %v; want it passed, its hold put back, still rolling", pass, err)
	}
	if len(pass.Wake) == 0 {
		t.Fatal("the canary passed but wakes nobody of the wave")
	}
	// Its controller went on at the same moment (a second new pod, not
	// Ready yet), and the write of the pass was refused (a conflict): the
	// rest of the wave still waits, and the canary still passes.
	waiting()
	canary.Verification.Healthy, canary.Verification.Pods, canary.Verification.HealthySince = false, 2, time.Time{}
	if again, err := s.Decide(t.Context(), canary); err != nil || again.Transition != PassCanary {
		t.Fatalf("canary passed, a second pod not Ready yet, the pass not written: %+v %v; want it passed again", again, err)
	}
	s.CanaryWritten(dep("a"), rec, *pass.Record) // the reconciler wrote it
	for _, n := range names[1:] {
		d, err := s.Decide(t.Context(), wants(n))
		if err != nil || d.Transition != Stamp || d.Record.Canary != NoCanary || len(d.Hold) != 0 {
			t.Fatalf("%s after the canary passed: %+v %v; want a plain stamp", n, d, err)
		}
	}
}

// A canary whose pod fails closes failed and keeps its hold with the halt:
// no second pod of it gets the change. A workload that opted out of the
// canary does not wait for one.
func TestCanaryFailureKeepsItsHold(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	d, err := s.Decide(t.Context(), Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", nil), Ours: true, Need: NeedsRollout,
		Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), Canary: true, VerifyWindow: 30 * time.Second})
	if err != nil || d.Transition != Stamp || d.Record.Canary != CanaryRunning {
		t.Fatalf("a: %+v %v; want the canary", d, err)
	}
	optedOut := Observation{Key: dep("b"), Kind: deploymentKind, Object: threeReplicas("b", nil), Ours: true, Need: NeedsRollout,
		Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), VerifyWindow: 30 * time.Second}
	if d, err := s.Decide(t.Context(), optedOut); err != nil || d.Transition != Stamp || d.Record.Canary != NoCanary {
		t.Fatalf("b, canary off: %+v %v; want a plain stamp at once", d, err)
	}
	rec := *d.Record
	failing := Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", &rec), Ours: true, Need: NeedsNothing, Canary: true,
		VerifyWindow: 30 * time.Second, Verification: Verification{Read: true, Pods: 1, Problem: "pod a-x: container app restarted 1 times"}}
	failing.Object.(*appsv1.Deployment).Status.UpdatedReplicas = 1
	f, err := s.Decide(t.Context(), failing)
	if err != nil || f.Transition != CloseFailed || f.Failure == "" || f.Record.State != Failed || f.Record.Halted == "" {
		t.Fatalf("failing canary: %+v %v; want it failed and halted", f, err)
	}
	// Its hold kept, and paused: its Deployment makes no second pod of the
	// change, even if the failed pod later counts as available.
	held, _ := workload.DecodeHold(rec.Hold)
	if want := held.With(workload.Hold{{Path: "spec.paused", Set: true}}).Encode(); f.Record.Hold != want {
		t.Fatalf("failing canary's hold %s, want its hold and the pause %s", f.Record.Hold, want)
	}
	if len(f.Hold) != 1 || f.Hold[0].Path != "spec.paused" || f.Hold[0].Set != true || !strings.Contains(f.Failure, "paused") {
		t.Fatalf("failing canary writes %+v (%q), want spec.paused set, and the failure saying so", f.Hold, f.Failure)
	}
}

// A canary that failed is paused; while its pod is not healthy no halt
// lifts, and the next change's canary unpauses it in its stamp and holds
// it as any canary. Its pod healthy for a full window (a restart at its
// start, then lasting health) lifts the halt and puts back the pause and
// the hold: the change was not the config's fault after all (issue 52: a
// pause that outlived lasting health left the Deployment paused for good).
func TestFrozenCanaryThawsWithTheNextChange(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	bad := []Change{{Ref: ref, Content: "00aa"}}
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	hold := workload.Hold{{Path: "spec.strategy.rollingUpdate.maxSurge", Set: float64(1)}, {Path: "spec.strategy.rollingUpdate.maxUnavailable", Set: float64(0)},
		{Path: "spec.minReadySeconds", Set: float64(90)}, {Path: "spec.paused", Set: true}}
	failed := StartRecord(t0.Add(-time.Minute), bad, false).AsCanary(hold.Encode()).Fail(true)
	d := threeReplicas("a", &failed)
	d.Spec.Paused, d.Spec.MinReadySeconds = true, 90
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}
	d.Status.UpdatedReplicas = 1
	crashing := Observation{Key: dep("a"), Kind: deploymentKind, Object: d, Ours: true, Need: NeedsNothing, Canary: true, VerifyWindow: 30 * time.Second,
		Verification: Verification{Window: 0, Read: true, Healthy: false, Pods: 1}}
	if r, err := s.Decide(t.Context(), crashing); err != nil || r.Transition == Resume {
		t.Fatalf("paused after its failure, its pod not healthy: %+v %v; want no recovery", r, err)
	}
	recovering := crashing
	recovering.Verification = Verification{Window: 0, Read: true, Healthy: true, Pods: 1, HealthySince: t0.Add(-20 * time.Second)}
	if r, err := s.Decide(t.Context(), recovering); err != nil || r.Transition == Resume || r.After <= 0 {
		t.Fatalf("its pod healthy for 20 s of a 30 s window (its effective window 0, minReadySeconds held): %+v %v; want no recovery yet, a look again", r, err)
	}
	recovering.Verification.HealthySince = t0.Add(-31 * time.Second)
	r, err := s.Decide(t.Context(), recovering)
	if err != nil || r.Transition != Resume || r.Record.Halted != "" || r.Record.Hold != "" || len(r.Patches) != 1 {
		t.Fatalf("its pod healthy for a full window: %+v %v; want the halt lifted and the hold put back", r, err)
	}
	if spec, _ := r.Patches[0].Spec["spec"].(map[string]any); spec["paused"] != nil || !hasKey(spec, "paused") || !hasKey(spec, "minReadySeconds") {
		t.Fatalf("the recovery's patch %v: want paused and the hold put back", r.Patches[0].Spec)
	}
	next := crashing
	next.Need, next.Hash, next.Data, next.Sources = NeedsRollout, "v1-fixed", dataOf("v1-fixed"), sourcesOf([]Change{{Ref: ref, Content: "00bb"}})
	st, err := s.Decide(t.Context(), next)
	if err != nil || st.Transition != Stamp || st.Record.Canary != CanaryRunning {
		t.Fatalf("the next change: %+v %v; want a canary stamp", st, err)
	}
	patch := st.Hold.SetPatch()
	if spec := patch["spec"].(map[string]any); spec["paused"] != nil || !hasKey(spec, "paused") || spec["minReadySeconds"] != float64(90) {
		t.Fatalf("the next canary's patch %v: want paused put back (null) and the hold kept", patch)
	}
	if after, _ := workload.DecodeHold(st.Record.Hold); after.Freezes(d) {
		t.Fatalf("the next canary's record %s still freezes it", st.Record.Hold)
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// A canary passes on its first pod: Ready with no restart for the window,
// whatever later pods of the revision show, unless one of them shows a
// sign of failure.
func TestCanaryPassesOnItsFirstPod(t *testing.T) {
	now := t0
	o := Observation{VerifyWindow: 30 * time.Second, Verification: Verification{Read: true, Pods: 2,
		FirstHealthySince: now.Add(-31 * time.Second), HealthySince: now.Add(-time.Second)}}
	if at, ok := canaryPassAt(o); !ok || at.After(now) {
		t.Fatalf("first pod healthy for 31 s of 30, a second not Ready: pass at %v (%v), want passed", at, ok)
	}
	o.Verification.Problem = "pod b: container app restarted 1 times"
	if _, ok := canaryPassAt(o); ok {
		t.Fatal("a sign of failure in a later pod: want no pass")
	}
	o.Verification.Problem, o.Verification.FirstHealthySince = "", time.Time{}
	if _, ok := canaryPassAt(o); ok {
		t.Fatal("no pod Ready: want no pass")
	}
}

// A canary held longer than the progress deadline (a workload's window of
// 15 minutes, the default 10-minute deadline): its healthy pod waits for
// the window by configstamp's hold, which is no stall, so it does not fail
// by the deadline; it passes when the window ends.
func TestCanaryHeldPastTheProgressDeadlineDoesNotFail(t *testing.T) {
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	rec := StartRecord(t0.Add(-12*time.Minute), cause, false).AsCanary("hold")
	healthy := t0.Add(-11 * time.Minute)
	d := threeReplicas("a", &rec)
	d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 1, 3
	sit := Situation{Observation: Observation{Key: dep("a"), Kind: deploymentKind, Object: d, Ours: true, Canary: true, VerifyWindow: 15 * time.Minute,
		Verification: Verification{Read: true, Healthy: true, Pods: 1, HealthySince: healthy, FirstHealthySince: healthy}},
		Record: rec, Now: t0, Progressed: healthy}
	pol := Policy{ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true}
	if p := Rules(sit, pol); p.Transition.closes() || p.Failure != "" {
		t.Fatalf("plan %+v: a healthy canary held 11 minutes of its 15-minute window failed by the 10-minute deadline", p)
	}
	sit.Now = healthy.Add(15 * time.Minute)
	if p := Rules(sit, pol); p.Transition != PassCanary {
		t.Fatalf("plan %+v: want the canary passed when its window ended", p)
	}
}

// Canaries, which the plugin's plan names, are the canaries the scheduler
// grants a wave one after the other: per namespace and per change (a
// workload referencing other keys of the source rolls another change, and
// is its canary), the first of each in wave order; canaries off: none.
func TestCanariesAreTheSchedulersOwn(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	x, y := []Change{{Ref: ref, Content: "00aa"}}, []Change{{Ref: ref, Content: "00bb"}}
	both := []Change{{Ref: ref, Content: "00aa"}, {Ref: stamp.ObjectRef{Kind: stamp.KindSecret, Name: "s"}, Content: "00cc"}}
	type w struct {
		key      Key
		priority int
		causes   []Change
		off      bool
	}
	wave := []w{
		{key: dep("a"), causes: x}, {key: dep("b"), causes: y}, {key: dep("c"), causes: x},
		{key: dep("d"), priority: 5, causes: x}, {key: dep("e"), priority: 9, causes: y, off: true},
		{key: dep("f"), causes: both}, {key: depIn("other", "a"), causes: x}, {key: depIn("other", "b"), causes: x},
	}
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	var waiting []Waiting
	for _, x := range wave {
		s.Announce(x.key, x.priority, ref)
		if !x.off {
			waiting = append(waiting, Waiting{Key: x.key, Place: Place{Priority: x.priority}, Causes: x.causes})
		}
	}
	var granted []Key
	stamped := map[Key]bool{}
	for round := 0; len(stamped) < len(wave) && round < 20; round++ {
		for _, x := range wave {
			if stamped[x.key] {
				continue
			}
			obj := threeReplicas(x.key.Name, nil)
			obj.Namespace = x.key.Namespace
			d, err := s.Decide(t.Context(), Observation{Key: x.key, Kind: deploymentKind, Object: obj, Ours: true, Need: NeedsRollout, Priority: x.priority,
				Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(x.causes), Canary: !x.off, VerifyWindow: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if d.Transition != Stamp {
				continue
			}
			stamped[x.key] = true
			if d.Record.Canary == CanaryRunning {
				granted = append(granted, x.key)
				s.CanaryWritten(x.key, *d.Record, d.Record.PassCanary()) // it passed
			}
		}
		c.advance(canaryWait)
	}
	canaries := Canaries(waiting)
	want := slices.Collect(maps.Keys(canaries))
	slices.SortFunc(granted, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(want, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	if !slices.Equal(granted, want) || len(stamped) != len(wave) {
		t.Fatalf("the scheduler granted canaries to %v (%d of %d stamped); Canaries says %v", granted, len(stamped), len(wave), want)
	}
	// d (x), b (y), f (only the Secret's change is its own), other/a (x)
	if got := FormatChanges(canaries[dep("f")]); len(canaries) != 4 || got != "Secret/s@00cc" || FormatChanges(canaries[dep("d")]) != "ConfigMap/shared@00aa" {
		t.Errorf("canaries %v, want 4, f the canary of the Secret's change only", canaries)
	}
}

// The change's debounce runs from the change, the same for every workload
// it concerns: a workload whose first reconcile comes late (a loaded
// manager, seen on the real node in CI) keeps its place in the wave, and
// the one first in wave order is still the canary. Before, each debounce
// ran from the workload's own first reconcile, and a workload of lower
// priority whose debounce ended first took the canary.
func TestLateReconcileKeepsItsPlaceInTheWave(t *testing.T) {
	s, c, wants := firstAndSecond(t)
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second within the debounce: %+v %v; want it to wait", d, err)
	}
	c.advance(1500 * time.Millisecond) // first's reconcile comes late
	if d, err := s.Decide(t.Context(), wants("first", 10)); err != nil || d.Transition == Stamp {
		t.Fatalf("first within the debounce: %+v %v; want it to wait", d, err)
	}
	c.advance(600 * time.Millisecond) // second's debounce is over
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second, after its debounce, with first (priority 10) about to ask: %+v %v; want it to wait for first's canary", d, err)
	}
	d, err := s.Decide(t.Context(), wants("first", 10))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("first, after the change's debounce: %+v %v; want the canary's stamp", d, err)
	}
}

// firstAndSecond is a waveScheduler where a change of ConfigMap shared was
// announced to first (priority 10) and second (priority 0), and what each
// observes of it (wantsChange).
func firstAndSecond(t *testing.T) (*Scheduler, *clock, func(name string, priority int) Observation) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	s, c := waveScheduler(t)
	s.Announce(dep("first"), 10, ref)
	s.Announce(dep("second"), 0, ref)
	return s, c, func(name string, priority int) Observation { return wantsChange(name, priority, cause, c.now()) }
}

// bothPastTheDebounce is firstAndSecond, both asked within their debounce
// window (they wait), and the clock past it.
func bothPastTheDebounce(t *testing.T) (*Scheduler, *clock, func(name string, priority int) Observation) {
	t.Helper()
	s, c, wants := firstAndSecond(t)
	for _, w := range []Observation{wants("first", 10), wants("second", 0)} {
		if d, err := s.Decide(t.Context(), w); err != nil || d.Transition == Stamp {
			t.Fatalf("%s within the debounce: %+v %v; want it to wait", w.Key.Name, d, err)
		}
	}
	c.advance(2100 * time.Millisecond)
	return s, c, wants
}

// waveScheduler is a scheduler of canaries with a budget of 10, halting,
// and no halt in force.
func waveScheduler(t *testing.T) (*Scheduler, *clock) {
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	return s, c
}

// wantsChange observes name, of priority, three replicas, whose sources
// (read at readAt) ask for a rollout of cause after a 2 s debounce.
func wantsChange(name string, priority int, cause []Change, readAt time.Time) Observation {
	return Observation{Key: dep(name), Kind: deploymentKind, Object: threeReplicas(name, nil), Ours: true, Need: NeedsRollout,
		Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), Canary: true, VerifyWindow: 30 * time.Second, Priority: priority,
		Window: 2 * time.Second, ReadAt: readAt}
}

// A reconcile that read the sources before a change was announced finds
// nothing new; the change's own reconcile is queued behind it. It keeps the
// workload's place in the wave: before, it dropped it, and on a loaded node
// (t10's real-node run) the workload of priority 0 asked first and took the
// change's canary.
func TestReconcileOnOlderDataKeepsItsPlaceInTheWave(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	s, c := waveScheduler(t)
	wants := func(name string, priority int) Observation { return wantsChange(name, priority, cause, c.now()) }
	older := wants("first", 10)
	older.Need, older.Hash = NeedsNothing, "v1-old"
	c.advance(100 * time.Millisecond)
	s.Announce(dep("first"), 10, ref)
	s.Announce(dep("second"), 0, ref)
	if d, err := s.Decide(t.Context(), older); err != nil || d.Transition != Settle {
		t.Fatalf("first, read before the change: %+v %v; want nothing to do", d, err)
	}
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second within the debounce: %+v %v; want it to wait", d, err)
	}
	c.advance(2100 * time.Millisecond)
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second, after its debounce, with first (priority 10) queued on the change: %+v %v; want it to wait for first's canary", d, err)
	}
	d, err := s.Decide(t.Context(), wants("first", 10))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("first, on the change: %+v %v; want the canary's stamp", d, err)
	}
	// A reconcile that read the sources after the announce and found nothing
	// drops the place: the change does not concern it after all.
	s.Announce(dep("third"), 5, ref)
	c.advance(time.Millisecond)
	none := wants("third", 5)
	none.Need, none.Hash, none.ReadAt = NeedsNothing, "v1-old", c.now()
	if d, err := s.Decide(t.Context(), none); err != nil || d.Transition != Settle {
		t.Fatalf("third, read after the announce: %+v %v; want nothing to do", d, err)
	}
	if _, ok := s.pending[dep("third")]; ok {
		t.Errorf("third still has its place in the wave after it found nothing to roll out")
	}
}

// A canary's stamp that did not land (the write found the workload changed:
// its own controller updated its status at that moment) keeps the
// workload's place in the wave. Before, the grant dropped it: the next of
// the wave (priority 0) took the change's canary while the first asked again
// as a newcomer, with a new debounce window (the real node, ci23: second
// ran the bad value, first was never stamped).
func TestAStampThatDidNotLandKeepsItsPlaceInTheWave(t *testing.T) {
	s, c, wants := bothPastTheDebounce(t)
	d, err := s.Decide(t.Context(), wants("first", 10))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning || !d.Release {
		t.Fatalf("first, after the debounce: %+v %v; want the canary's stamp, its slot given back if it does not land", d, err)
	}
	s.Release(dep("first")) // the write was stale: act gives the slot back
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second, while first's stamp is written again: %+v %v; want it to wait for first's canary", d, err)
	}
	c.advance(StaleRecheck)
	d, err = s.Decide(t.Context(), wants("first", 10))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("first, asking again after the stale write: %+v %v; want the canary's stamp at once, no second debounce", d, err)
	}
}

// Two reconciles of one wave run at once: first, ahead in the wave, holds
// its slot and has not yet claimed the change's canary (its halt and
// suspect checks read the cache in between) when second asks. second
// waits: a granted entry keeps its place in the wave until its stamp is
// written or given back. Before, first was then in neither the wave's
// entries nor the canary claims, second took the canary, and first, told
// to wait for it, was never stamped (the real node under load: ci23,
// ci26, ci27, where a Recreate Deployment ran the change before the
// cheaper canary).
func TestAGrantedWorkloadKeepsItsPlaceUntilItClaims(t *testing.T) {
	s, _, wants := bothPastTheDebounce(t)
	if wait, err := s.Acquire(t.Context(), dep("first"), 10, true); err != nil || wait != 0 {
		t.Fatalf("first's slot: wait %v, %v", wait, err)
	}
	if d, err := s.Decide(t.Context(), wants("second", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("second, while first holds its slot before its claim: %+v %v; want it to wait for first's canary", d, err)
	}
	cause := []Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}}
	if canary, wait, err := s.ClaimCanary(t.Context(), dep("first"), 10, cause, false); err != nil || !canary || wait != 0 {
		t.Fatalf("first's claim: canary %v, wait %v, %v; want the change's canary", canary, wait, err)
	}
}

// A workload announced again before its reconcile asked (a second change
// to its source) debounces from the newer change, not the first.
func TestAnnouncedAgainDebouncesFromTheNewerChange(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute})
	s.Announce(dep("a"), 0, ref)
	c.advance(8 * time.Second)
	s.Announce(dep("a"), 0, ref)
	if wait := s.Debounce(dep("a"), "v1-new", 2*time.Second, 0, 0); wait != 2*time.Second {
		t.Fatalf("debounce after a change announced 8 s after the first: wait %v, want the whole window (2s) from the newer change", wait)
	}
}

// edgeWave is a scheduler at configstamp's defaults (the canary on, a 30 s
// window, halting) with a budget (the default: ten) and no halt in force, the change its
// workloads roll (of ConfigMap shared), and what a workload of three
// replicas of a priority that wants it is observed as.
func edgeWave(t *testing.T, budget int) (*Scheduler, *clock, stamp.ObjectRef, func(name string, priority int) Observation) {
	t.Helper()
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	s, c := newTestScheduler(t, Policy{MaxConcurrent: budget, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second})
	s.Halts = haltsFunc(func() string { return "" })
	return s, c, ref, func(name string, priority int) Observation {
		return Observation{Key: dep(name), Kind: deploymentKind, Object: threeReplicas(name, nil), Ours: true, Need: NeedsRollout, Priority: priority,
			Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), Canary: true, VerifyWindow: 30 * time.Second}
	}
}

// The first edge: a, first in the wave (rollout-priority 10), was
// paused by its user. It can make no pod of the change, so it is never the
// change's canary: b, the next in the wave, is (held at one new pod), the
// others wait for b even though a comes before them, and a itself waits
// for b's canary as the others do. Broken on purpose (a could be the
// canary), a "passed" with no pod and the rest were stamped at once.
func TestAPausedWorkloadIsNeverTheCanary(t *testing.T) {
	s, _, ref, wants := edgeWave(t, 10)
	paused := wants("a", 10)
	paused.Object.(*appsv1.Deployment).Spec.Paused = true
	for _, n := range []string{"a", "b", "c", "d"} {
		s.Announce(dep(n), map[string]int{"a": 10}[n], ref)
	}
	if d, err := s.Decide(t.Context(), paused); err != nil || d.Transition == Stamp {
		t.Fatalf("a, paused, while b can be the canary: %+v %v; want it to wait for b's canary", d, err)
	}
	for _, n := range []string{"d", "c"} { // they come after b
		if d, err := s.Decide(t.Context(), wants(n, 0)); err != nil || d.Transition == Stamp {
			t.Fatalf("%s before b's canary: %+v %v; want it to wait", n, d, err)
		}
	}
	d, err := s.Decide(t.Context(), wants("b", 0))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning || len(d.Hold) == 0 {
		t.Fatalf("b, the first that can make a pod: %+v %v; want the canary, held", d, err)
	}
	for _, o := range []Observation{paused, wants("c", 0), wants("d", 0)} {
		if d, err := s.Decide(t.Context(), o); err != nil || d.Transition == Stamp {
			t.Fatalf("%s while b's canary runs: %+v %v; want it to wait", o.Key.Name, d, err)
		}
	}
}

// With no other workload of the change to be its canary, a paused one is
// not stamped (its pods, once resumed, would run the change untried): it
// waits, and the next workload that can make a pod is the canary. (Before,
// a was stamped at once as no canary, and judged whole when resumed.)
func TestAPausedWorkloadAloneIsNotStamped(t *testing.T) {
	s, _, _, wants := edgeWave(t, 10)
	o := wants("a", 0)
	o.Object.(*appsv1.Deployment).Spec.Paused = true
	d, err := s.Decide(t.Context(), o)
	if err != nil || d.Transition == Stamp {
		t.Fatalf("a, paused and alone: %+v %v; want it to wait, unstamped", d, err)
	}
	if d, err := s.Decide(t.Context(), wants("b", 0)); err != nil || d.Transition != Stamp || d.Record.Canary != CanaryRunning {
		t.Fatalf("b after the paused a: %+v %v; want b the change's canary", d, err)
	}
}

// A canary its user pauses mid-way, or scales to 0, made no judged pod: it
// does not pass (nor fail by the deadline, which its controller does not
// count while paused); it is followed.
func TestAPausedCanaryDoesNotPass(t *testing.T) {
	s, c, _, wants := edgeWave(t, 10)
	o := wants("a", 0)
	o.Object = workloadIn("a", true, nil) // one replica: its whole rollout is its canary
	d, err := s.Decide(t.Context(), o)
	if err != nil || d.Transition != Stamp || d.Record.Canary != CanaryRunning || len(d.Hold) != 0 {
		t.Fatalf("a: %+v %v; want the canary, unheld", d, err)
	}
	rec := *d.Record
	obj := workloadIn("a", true, nil)
	sealed(obj, rec, testKeys.Current())
	obj.Spec.Paused = true
	c.advance(11 * time.Minute) // past the progress deadline
	f, err := s.Decide(t.Context(), Observation{Key: dep("a"), Kind: deploymentKind, Object: obj, Ours: true, Need: NeedsNothing, Canary: true,
		VerifyWindow: 30 * time.Second, Verification: Verification{Read: true, Healthy: true}})
	if err != nil || f.Transition != Follow || f.After <= 0 {
		t.Fatalf("the canary paused by its user: %+v %v; want it followed, neither passed nor failed", f, err)
	}
	// Scaled to no replicas instead: no pod, no pass either.
	obj.Spec.Paused, obj.Spec.Replicas = false, ptr.To(int32(0))
	z, err := s.Decide(t.Context(), Observation{Key: dep("a"), Kind: deploymentKind, Object: obj, Ours: true, Need: NeedsNothing, Canary: true,
		VerifyWindow: 30 * time.Second, Verification: Verification{Read: true, Healthy: true}})
	if err != nil || z.Transition != Follow {
		t.Fatalf("the canary scaled to 0: %+v %v; want it followed, not passed", z, err)
	}
}

// A hold the API server rejects (an admission policy forbids the fields
// it sets) must not block the stamp: the decision carries the same stamp
// without the hold, its record the canary's, unheld.
func TestUnheldStampIsTheFallbackOfAHold(t *testing.T) {
	s, _, _, wants := edgeWave(t, 10)
	d, err := s.Decide(t.Context(), wants("a", 0))
	if err != nil || d.Transition != Stamp || len(d.Hold) == 0 || d.Unheld == nil {
		t.Fatalf("a: %+v %v; want a held canary stamp with its unheld fallback", d, err)
	}
	p := d.Unheld.Patch
	spec, _ := p.Spec["spec"].(map[string]any)
	if _, ok := spec["strategy"]; ok || spec["minReadySeconds"] != nil || !slices.Contains(p.Writes, WriteStamp) || slices.Contains(p.Writes, WriteHold) {
		t.Fatalf("the unheld patch %+v still sets the hold, or stamps nothing", p)
	}
	if p.Meta[AnnotationCanary] != string(CanaryRunning) || p.Meta[AnnotationHold] != nil || !p.Judged {
		t.Fatalf("the unheld patch's record %+v: want the canary's, no hold, on the judged version", p.Meta)
	}
	e := d.Unheld.Rejected(errors.New("denied by a policy"))
	if len(e.Events) != 1 || e.Events[0].Reason != ReasonHoldRejected || !strings.Contains(e.Events[0].Message, "denied by a policy") {
		t.Fatalf("the rejection tells %+v; want one HoldRejected event with the API server's answer", e.Events)
	}
}

// The issue's third edge: a bad value halts a; the user runs `kubectl
// configstamp resume` (its halted annotation removed), which unseals the
// record. The pause and the hold its failed canary set are put back at
// once (not left for good), and a later change's stamp puts back any still
// set; a user's own value since stands.
func TestResumeByHandPutsBackTheFailedCanarysHold(t *testing.T) {
	s, _, _, _ := edgeWave(t, 10)
	hold := workload.Hold{{Path: "spec.minReadySeconds", Set: float64(90)}, {Path: "spec.paused", Set: true}}
	failed := StartRecord(t0.Add(-time.Minute), lifecycleCause, false).AsCanary(hold.Encode()).Fail(true)
	d := threeReplicas("a", &failed)
	d.Spec.Paused, d.Spec.MinReadySeconds = true, 90
	delete(d.Annotations, AnnotationHalted)
	o := Observation{Key: dep("a"), Kind: deploymentKind, Object: d, Ours: true, Need: NeedsNothing, Canary: true, VerifyWindow: 30 * time.Second}
	got, err := s.Decide(t.Context(), o)
	if err != nil || got.Transition != Settle || len(got.Patches) != 1 {
		t.Fatalf("resumed by hand: %+v %v; want its hold put back", got, err)
	}
	p := got.Patches[0]
	if spec, _ := p.Spec["spec"].(map[string]any); !hasKey(spec, "paused") || spec["paused"] != nil || !hasKey(spec, "minReadySeconds") || !p.Judged {
		t.Fatalf("the patch %+v: want paused and minReadySeconds put back, on the judged version", p)
	}
	if v, ok := p.Meta[AnnotationHold]; !ok || v != nil || len(got.Events) != 1 || got.Events[0].Reason != ReasonPauseLifted {
		t.Fatalf("the patch's annotations %+v, events %+v: want the hold annotation removed and a PauseLifted event", p.Meta, got.Events)
	}
	// The user set minReadySeconds since: theirs stands; the pause goes.
	d.Spec.MinReadySeconds = 5
	if got, _ := s.Decide(t.Context(), o); len(got.Patches) != 1 || hasKey(got.Patches[0].Spec["spec"].(map[string]any), "minReadySeconds") {
		t.Fatalf("after the user's edit: %+v; want the pause alone put back", got.Patches)
	}
	// A later change's stamp, before the thaw landed, puts it back too.
	next := o
	next.Need, next.Hash, next.Data, next.Sources = NeedsRollout, "v1-fixed", dataOf("v1-fixed"), sourcesOf([]Change{{Ref: lifecycleCause[0].Ref, Content: "00bb"}})
	st, err := s.Decide(t.Context(), next)
	if err != nil || st.Transition != Stamp || len(st.Patches) != 1 {
		t.Fatalf("the next change: %+v %v; want a stamp", st, err)
	}
	if spec, _ := st.Patches[0].Spec["spec"].(map[string]any); !hasKey(spec, "paused") || spec["paused"] != nil {
		t.Fatalf("the next change's stamp %v: want the pause put back", st.Patches[0].Spec)
	}
}

// A workload with nothing to roll (no replicas here; OnDelete, a partition
// that holds every pod) is no canary either, and no longer gets the change
// while the canary runs: it waits for it as the others do. Before, it was
// stamped at once, so a bad change reached it before any pod was judged,
// and it ran the change unjudged when it scaled up.
func TestAWorkloadWithNothingToRollWaitsForTheCanary(t *testing.T) {
	s, _, ref, wants := edgeWave(t, 10)
	zero := wants("a", 0)
	zero.Object.(*appsv1.Deployment).Spec.Replicas = ptr.To(int32(0))
	s.Announce(dep("a"), 0, ref)
	s.Announce(dep("b"), 0, ref)
	if d, err := s.Decide(t.Context(), zero); err != nil || d.Transition == Stamp {
		t.Fatalf("a, no replicas, first in the wave: %+v %v; want it to wait for b's canary", d, err)
	}
	d, err := s.Decide(t.Context(), wants("b", 0))
	if err != nil || d.Transition != Stamp || d.Record.Canary != CanaryRunning {
		t.Fatalf("b: %+v %v; want the canary", d, err)
	}
	if d, err := s.Decide(t.Context(), zero); err != nil || d.Transition == Stamp {
		t.Fatalf("a while b's canary runs: %+v %v; want it to wait", d, err)
	}
}

// A fix applied while b, second in the wave, runs the canary of the bad
// change (its pods started after the fix, so they are healthy): b
// supersedes its rollout with the fix and stays the canary; a, first in
// the wave, waits for it. Before, b waited for a (first in the wave) and a
// for b's open canary: neither moved until b's slot ended (the real-node
// edge table's resume row, in make test).
func TestARunningCanarySupersededStaysTheCanary(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	bad, fix := []Change{{Ref: ref, Content: "00aa"}}, []Change{{Ref: ref, Content: "00bb"}}
	hold := deploymentKind.Hold(threeReplicas("b", nil), 30*time.Second)
	running := StartRecord(t0.Add(-10*time.Second), bad, false).AsCanary(hold.Encode())
	b := threeReplicas("b", &running)
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second}, b)
	s.Halts = haltsFunc(func() string { return "" })
	wantsFix := func(name string, priority int, obj *appsv1.Deployment) Observation {
		return Observation{Key: dep(name), Kind: deploymentKind, Object: obj, Ours: true, Need: NeedsRollout, Priority: priority,
			Hash: "v1-fix", Data: dataOf("v1-fix"), Sources: sourcesOf(fix), Canary: true, VerifyWindow: 30 * time.Second,
			Verification: Verification{Read: true, Pods: 1}}
	}
	s.Announce(dep("a"), 10, ref)
	s.Announce(dep("b"), 0, ref)
	if d, err := s.Decide(t.Context(), wantsFix("a", 10, threeReplicas("a", nil))); err != nil || d.Transition == Stamp {
		t.Fatalf("a while b's canary runs: %+v %v; want it to wait", d, err)
	}
	for _, complete := range []bool{false, true} {
		// Its one new pod not yet available; or its controller went on by
		// itself once the pod was available for the held minReadySeconds,
		// and its rollout is complete.
		obj := b.DeepCopy()
		if !complete {
			obj.Status.UpdatedReplicas = 1
		}
		d, err := s.Decide(t.Context(), wantsFix("b", 0, obj))
		if err != nil || d.Transition != Stamp || !d.Supersedes || d.Record == nil || d.Record.Canary != CanaryRunning {
			t.Fatalf("b, the running canary, complete %v, when the fix comes: %+v %v; want the fix stamped over it, still the canary", complete, d, err)
		}
		s.Release(dep("b"))
		s.canaryClaims = map[Key]canaryClaim{}
	}
}

// With a budget of one, workloads that can make no pod come first in the
// wave (priority 10: an OnDelete StatefulSet, a paused Deployment) and wait
// for the change's canary; the canary, after them in the wave, still gets
// the one slot. Before, it counted them ahead of it for the slot and waited
// for them while they waited for it (test/safety
// TestOnDeleteAndPartitionedHoldNoSlot, in make test).
func TestIdleWorkloadsAheadDoNotKeepTheCanaryFromItsSlot(t *testing.T) {
	s, _, ref, wants := edgeWave(t, 1)
	zero, paused := wants("a", 10), wants("b", 10)
	zero.Object.(*appsv1.Deployment).Spec.Replicas = ptr.To(int32(0))
	paused.Object.(*appsv1.Deployment).Spec.Paused = true
	for _, n := range []string{"a", "b", "c"} {
		s.Announce(dep(n), map[string]int{"a": 10, "b": 10}[n], ref)
	}
	for _, o := range []Observation{zero, paused} {
		if d, err := s.Decide(t.Context(), o); err != nil || d.Transition == Stamp {
			t.Fatalf("%s, idle, before the canary: %+v %v; want it to wait", o.Key.Name, d, err)
		}
	}
	d, err := s.Decide(t.Context(), wants("c", 0))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("c, the only one that can make a pod, budget 1: %+v %v; want the canary stamp", d, err)
	}
}

// A canary that passed before a restart (or under another leader) lets its
// change roll on without a second canary: the new process finds the pass
// in the sealed records of its cache (IndexPassed), as it would have kept
// it in memory. A pass of another namespace, of more than passedFor ago, a
// failed canary or a record whose seal does not verify passes nothing.
func TestAPassBeforeARestartNeedsNoSecondCanary(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	cause := []Change{{Ref: ref, Content: "00aa"}}
	policy := Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second}
	canary := StartRecord(t0.Add(-2*time.Minute), cause, false).AsCanary("x").PassCanary()
	whole := StartRecord(t0.Add(-2*time.Minute), cause, false).AsCanary("")
	elsewhere := threeReplicas("a", &canary)
	elsewhere.Namespace = "other"
	forged := threeReplicas("a", &canary)
	forged.Annotations[AnnotationCause] = "ConfigMap/shared@00aa,ConfigMap/other@00bb"
	for _, tc := range []struct {
		name  string
		cache client.Object
		want  string // "canary", "plain" (no canary) or "wait" (for a's)
	}{
		{"nothing passed", nil, "canary"},
		{"a held canary passed, still rolling", threeReplicas("a", &canary), "plain"},
		{"a held canary passed, completed", threeReplicas("a", ptr.To(canary.Complete("v1-new"))), "plain"},
		{"a whole canary completed", threeReplicas("a", ptr.To(whole.Complete("v1-new"))), "plain"},
		{"a whole canary still rolling", threeReplicas("a", &whole), "wait"},
		{"a canary failed", threeReplicas("a", ptr.To(whole.Fail(false))), "canary"},
		{"passed in another namespace", elsewhere, "canary"},
		{"passed more than passedFor ago", threeReplicas("a", ptr.To(StartRecord(t0.Add(-passedFor-time.Minute), cause, false).AsCanary("").Complete("v1-new"))), "canary"},
		{"a record whose seal does not verify", forged, "canary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.cache != nil {
				objs = append(objs, tc.cache)
			}
			s, _ := newTestScheduler(t, policy, objs...)
			s.Halts = haltsFunc(func() string { return "" })
			b := Observation{Key: dep("b"), Kind: deploymentKind, Object: threeReplicas("b", nil), Ours: true, Need: NeedsRollout,
				Hash: "v1-new", Data: dataOf("v1-new"), Sources: sourcesOf(cause), Canary: true, VerifyWindow: 30 * time.Second}
			d, err := s.Decide(t.Context(), b)
			got := "wait"
			if d.Transition == Stamp && d.Record != nil {
				got = map[bool]string{true: "canary", false: "plain"}[d.Record.Canary == CanaryRunning]
			}
			if err != nil || got != tc.want {
				t.Fatalf("b after a restart: %+v %v; got %s, want %s", d, err, got, tc.want)
			}
		})
	}
}

// A paused workload stamped with the change (it made no pod of it) is
// Idle, never completed, and holds no slot of the budget (a budget of one:
// b still gets it). Resumed later, it is judged as a rollout started then:
// Rolling, a slot counted, and a crash of its new pods fails it. Before,
// its record said completed, and nothing judged it once resumed.
func TestAnIdleWorkloadIsJudgedWhenItMakesPods(t *testing.T) {
	s, c, _, wants := edgeWave(t, 1)
	a := wants("a", 0)
	a.Canary = false // opted out of the canary: b need not wait for one
	a.Object.(*appsv1.Deployment).Spec.Paused = true
	d, err := s.Decide(t.Context(), a)
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.State != Idle {
		t.Fatalf("a, paused: %+v %v; want a stamp whose record is idle, taking no slot", d, err)
	}
	if n, err := s.SlotsInUse(t.Context()); err != nil || n != 0 {
		t.Fatalf("slots in use after a's idle stamp: %d %v, want 0", n, err)
	}
	idle := *d.Record

	c.advance(time.Hour) // its user resumes it an hour later
	resumed := Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", &idle), Ours: true, Need: NeedsNothing}
	resumed.Object.(*appsv1.Deployment).Status.UpdatedReplicas = 1
	d, err = s.Decide(t.Context(), resumed)
	if err != nil || d.Transition != Unidle || d.Record == nil || d.Record.State != Rolling || !d.Record.Started.Equal(c.now()) {
		t.Fatalf("a resumed: %+v %v; want its rollout judged from now (rolling)", d, err)
	}
	rolling := *d.Record
	crashed := Observation{Key: dep("a"), Kind: deploymentKind, Object: threeReplicas("a", &rolling), Ours: true, Need: NeedsNothing,
		Verification: Verification{Read: true, Problem: "pod a-x: container app restarted 1 times"}}
	if d, err := s.Decide(t.Context(), crashed); err != nil || d.Transition != CloseFailed {
		t.Fatalf("a's new pods crash: %+v %v; want its rollout failed", d, err)
	}
}

// A dormant workload (paused by its user, no replicas, a DaemonSet on no
// node) alone in its change: it is not stamped while the change has passed
// no canary, since its pods, when they come, would run the change untried
// and whole. Once it makes pods (resumed, scaled up), it is the canary,
// held at one new pod. Once a canary of the change passed elsewhere, a
// dormant workload is stamped at once, idle, taking no slot. Broken on
// purpose (no wait for the dormant), a was stamped idle at once and judged
// whole when resumed.
func TestADormantWorkloadWaitsForACanary(t *testing.T) {
	for name, sleep := range map[string]func(o Observation){
		"paused":      func(o Observation) { o.Object.(*appsv1.Deployment).Spec.Paused = true },
		"no replicas": func(o Observation) { o.Object.(*appsv1.Deployment).Spec.Replicas = ptr.To(int32(0)) },
	} {
		t.Run(name, func(t *testing.T) {
			s, _, _, wants := edgeWave(t, 10)
			a := wants("a", 0)
			sleep(a)
			d, err := s.Decide(t.Context(), a)
			if err != nil || d.Transition == Stamp || d.After != dormantWait {
				t.Fatalf("a, %s, its change passed no canary: %+v %v; want it to wait %v, unstamped", name, d, err, dormantWait)
			}
			d, err = s.Decide(t.Context(), wants("a", 0)) // resumed, scaled up
			if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning || len(d.Hold) == 0 {
				t.Fatalf("a, making pods again: %+v %v; want it the canary, held", d, err)
			}

			s, _, ref, wants := edgeWave(t, 10)
			s.passCanary(dep("b"), []Change{{Ref: ref, Content: "00aa"}}, t0)
			a = wants("a", 0)
			sleep(a)
			d, err = s.Decide(t.Context(), a)
			if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.State != Idle || d.Record.Canary != NoCanary {
				t.Fatalf("a, %s, its change's canary passed on b: %+v %v; want it stamped, idle", name, d, err)
			}
		})
	}
}

// The canary is the cheapest of its change's first workloads: a, a
// Recreate Deployment of three replicas (its canary would replace all
// three), comes before b by name, but b, held at one new pod, is the
// canary and a waits for it. A rollout-priority still comes first: the
// user who puts a Recreate workload first asks for it. Broken on purpose
// (the wave order by priority and name only), a was the canary.
func TestTheCheapestCanaryGoesFirst(t *testing.T) {
	recreate := func(o Observation) Observation {
		o.Object.(*appsv1.Deployment).Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		return o
	}
	s, _, ref, wants := edgeWave(t, 10)
	for _, n := range []string{"a", "b"} {
		s.Announce(dep(n), 0, ref)
	}
	if d, err := s.Decide(t.Context(), recreate(wants("a", 0))); err != nil || d.Transition == Stamp {
		t.Fatalf("a (Recreate, three replicas): %+v %v; want it to wait for b's canary", d, err)
	}
	d, err := s.Decide(t.Context(), wants("b", 0))
	if err != nil || d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning || len(d.Hold) == 0 {
		t.Fatalf("b: %+v %v; want the canary, held at one pod", d, err)
	}

	s, _, ref, wants = edgeWave(t, 10)
	for n, p := range map[string]int{"a": 10, "b": 0} {
		s.Announce(dep(n), p, ref)
	}
	if d, err := s.Decide(t.Context(), wants("b", 0)); err != nil || d.Transition == Stamp {
		t.Fatalf("b, after a of rollout-priority 10: %+v %v; want it to wait", d, err)
	}
	if d, err := s.Decide(t.Context(), recreate(wants("a", 10))); err != nil || d.Transition != Stamp || d.Record.Canary != CanaryRunning {
		t.Fatalf("a, Recreate but of rollout-priority 10: %+v %v; want the canary", d, err)
	}
}
