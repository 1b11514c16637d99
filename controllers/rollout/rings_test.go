package rollout

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

func TestRingOf(t *testing.T) {
	for _, tc := range []struct {
		value    string
		ring     int
		in, warn bool
	}{
		{"0", 0, true, false}, {" 2 ", 2, true, false}, {"99", 99, true, false},
		{"100", 0, false, true}, {"-1", 0, false, true}, {"first", 0, false, true}, {"1.5", 0, false, true},
	} {
		ring, in, problem := RingOf(map[string]string{LabelRing: tc.value})
		if ring != tc.ring || in != tc.in || (problem != nil) != tc.warn {
			t.Errorf("%q: ring %d, in %v, problem %v; want %d, %v, a problem %v", tc.value, ring, in, problem, tc.ring, tc.in, tc.warn)
		}
	}
	if _, in, problem := RingOf(map[string]string{"team": "a"}); in || problem != nil {
		t.Errorf("no label: in a ring %v, problem %v", in, problem)
	}
}

// ringed is a Namespace in ring (-1: none).
func ringed(name string, ring int) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"owner": "platform"}}}
	if ring >= 0 {
		ns.Labels[LabelRing] = fmt.Sprint(ring)
	}
	return ns
}

// ringScenario is two namespaces of one copied ConfigMap: "base" in ring 0
// with workload a, "tenant" in ring 1 with workload b, which references
// its own copy as content (the copy's keyed digest).
type ringScenario struct {
	t    *testing.T
	s    *Scheduler
	c    *clock
	ref  stamp.ObjectRef
	base []Change
	b    []Change
}

func newRingScenario(t *testing.T, tenantContent string, tenantRing int) *ringScenario {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "ca-bundle"}
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute, HaltOnFailure: true, Canary: true, VerifyWindow: 30 * time.Second,
		RingSettle: 30 * time.Second}, ringed("base", 0), ringed("tenant", tenantRing))
	s.Rings = &Rings{Reader: s.Cache}
	s.Halts = haltsFunc(func() string { return "" })
	return &ringScenario{t: t, s: s, c: c, ref: ref,
		base: []Change{{Ref: ref, Content: "base-new"}}, b: []Change{{Ref: ref, Content: tenantContent}}}
}

func (r *ringScenario) wants(ns, name string, causes []Change) Observation {
	o := threeReplicas(name, nil)
	o.Namespace = ns
	return Observation{Key: depIn(ns, name), Kind: deploymentKind, Object: o, Ours: true, Need: NeedsRollout,
		Hash: "v1-" + name, Data: dataOf("v1-" + name), Sources: sourcesOf(causes), Canary: true, VerifyWindow: 30 * time.Second}
}

func (r *ringScenario) decide(ns, name string, causes []Change) Decision {
	r.t.Helper()
	d, err := r.s.Decide(r.t.Context(), r.wants(ns, name, causes))
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// run: the change reaches both copies; b asks first, a (ring 0) is stamped
// as its canary; b asks while it runs, then after it passed and a's rollout
// ended. It returns what b was told at each step.
func (r *ringScenario) run() []string {
	r.s.Announce(depIn("base", "a"), 0, r.ref)
	r.s.Announce(depIn("tenant", "b"), 0, r.ref)
	var told []string
	tell := func(d Decision) {
		canary := ""
		if d.Record != nil && d.Record.Canary == CanaryRunning {
			canary = " canary"
		}
		told = append(told, fmt.Sprintf("%v%s", d.Transition, canary))
	}
	r.c.advance(3 * time.Second) // past the debounce
	tell(r.decide("tenant", "b", r.b))
	a := r.decide("base", "a", r.base)
	if a.Transition != Stamp || a.Record == nil || a.Record.Canary != CanaryRunning {
		r.t.Fatalf("ring 0's workload: %+v; want it stamped as the change's canary", a)
	}
	r.put("base", "a", *a.Record) // the cache shows a's rollout
	tell(r.decide("tenant", "b", r.b))
	r.waitAsking(40 * time.Second)
	passed := *a.Record
	passed.Canary = CanaryPassed
	r.s.CanaryWritten(depIn("base", "a"), *a.Record, passed)
	r.put("base", "a", passed)
	tell(r.decide("tenant", "b", r.b)) // a still rolls
	r.s.Done(depIn("base", "a"))
	passed.State = Completed
	r.put("base", "a", passed) // a's rollout closed completed
	r.c.advance(2 * time.Second)
	tell(r.decide("tenant", "b", r.b))
	return told
}

// waitAsking lets d pass with b asking again every canaryWait, as a waiting
// workload does, each time told to wait.
func (r *ringScenario) waitAsking(d time.Duration) {
	r.t.Helper()
	for end := r.c.now().Add(d); r.c.now().Before(end); {
		r.c.advance(canaryWait)
		if got := r.decide("tenant", "b", r.b); got.Transition != Wait {
			r.t.Fatalf("ring 1 at %v of a %v wait: %v %v (%+v); want it to wait", r.c.now().Sub(t0), d, got.Transition, got.On, got.Effects)
		}
	}
}

// put writes name's record rec into the cache.
func (r *ringScenario) put(ns, name string, rec Record) {
	r.t.Helper()
	o := threeReplicas(name, nil)
	o.Namespace = ns
	sealed(o, rec, testKeys.Current())
	w := r.s.Cache.(client.Client)
	err := w.Create(r.t.Context(), o)
	if apierrors.IsAlreadyExists(err) {
		err = w.Update(r.t.Context(), o)
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// A namespace of ring 1 waits while ring 0 rolls the change of a source of
// the same name out, and then rolls it with no canary of its own: ring 0's
// canary judged it. What it waits for and whether it has a canary do not
// depend on whether its copy holds what ring 0's holds: a tenant of ring 1
// who writes a guess into its copy learns nothing of ring 0's content.
func TestRingOneWaitsForRingZeroWhateverItsCopyHolds(t *testing.T) {
	want := []string{"Wait", "Wait", "Wait", "Stamp"}
	for _, content := range []string{"base-new", "a-guess"} {
		got := newRingScenario(t, content, 1).run()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ring 1 with content %q: told %v; want %v", content, got, want)
		}
	}
	// Without rings (the tenant's namespace in none), it is its own
	// namespace's canary at once, as before rings.
	r := newRingScenario(t, "base-new", -1)
	r.s.Announce(depIn("base", "a"), 0, r.ref)
	r.s.Announce(depIn("tenant", "b"), 0, r.ref)
	r.c.advance(3 * time.Second)
	if d := r.decide("tenant", "b", r.b); d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Errorf("no ring: %+v; want a canary of its own at once", d)
	}
}

// A ring below that rolls for longer than ringWaitFor delays the ring above
// by no more: it then rolls with a canary of its own.
func TestRingWaitIsBounded(t *testing.T) {
	r := newRingScenario(t, "base-new", 1)
	r.s.Announce(depIn("base", "a"), 0, r.ref)
	r.s.Announce(depIn("tenant", "b"), 0, r.ref)
	r.c.advance(3 * time.Second)
	a := r.decide("base", "a", r.base)
	if a.Transition != Stamp {
		t.Fatalf("ring 0: %+v; want a stamp", a)
	}
	r.put("base", "a", *a.Record) // the cache shows a's rollout, stuck
	if d := r.decide("tenant", "b", r.b); d.Transition != Wait {
		t.Fatalf("ring 1 while ring 0 rolls: %+v; want it to wait", d)
	}
	r.waitAsking(r.s.ringWaitFor() - 5*time.Second) // from 3 s to the bound, less a step
	r.c.advance(canaryWait)
	d := r.decide("tenant", "b", r.b)
	if d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("ring 1 past the bound, ring 0 still rolling: %+v; want its own canary", d)
	}
}

// A ring-0 pass that came before the change of ring 1's copy was seen (a
// tenant's own later edit), or a halt of the source in a ring below, leaves
// ring 1 its own canary.
func TestRingProofIsNewerThanTheChange(t *testing.T) {
	r := newRingScenario(t, "base-new", 1)
	r.s.Announce(depIn("base", "a"), 0, r.ref)
	r.c.advance(3 * time.Second)
	a := r.decide("base", "a", r.base)
	passed := *a.Record
	passed.Canary = CanaryPassed
	r.s.CanaryWritten(depIn("base", "a"), *a.Record, passed)
	r.s.Done(depIn("base", "a"))
	r.c.advance(time.Minute)
	r.s.Announce(depIn("tenant", "b"), 0, r.ref) // the tenant's own edit, after ring 0's pass
	r.c.advance(3 * time.Second)
	if d := r.decide("tenant", "b", r.b); d.Transition != Wait {
		t.Fatalf("ring 1 within the settle, ring 0 idle: %+v; want it to wait", d)
	}
	r.waitAsking(r.s.Policy.RingSettle - 4*time.Second)
	r.c.advance(canaryWait)
	if d := r.decide("tenant", "b", r.b); d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("a change seen after ring 0's pass: %+v; want a canary of its own", d)
	}

	r = newRingScenario(t, "base-new", 2)
	r.s.Halts = haltsWhere(func(below func(string) bool) string {
		if below("tenant") || !below("base") {
			r.t.Fatal("Where asked of the wrong rings")
		}
		return "ConfigMap/ca-bundle@elsewhere" // halted in a ring between
	})
	told := r.run()
	if told[len(told)-1] != "Stamp canary" {
		t.Fatalf("a halt in a ring below: told %v; want its own canary at the end", told)
	}
}

// A ring-0 canary that started well before ring 1's copy changed (a slow
// canary of an earlier change of ring 0's copy, still running) judged that
// earlier change, not ring 1's: its pass, though after ring 1's change was
// seen, leaves ring 1 its own canary.
func TestRingProofStartedWithTheChange(t *testing.T) {
	r := newRingScenario(t, "a-later-value", 1)
	r.s.Announce(depIn("base", "a"), 0, r.ref)
	r.c.advance(3 * time.Second)
	a := r.decide("base", "a", r.base)
	if a.Transition != Stamp || a.Record == nil || a.Record.Canary != CanaryRunning {
		t.Fatalf("ring 0: %+v; want it stamped as the change's canary", a)
	}
	r.put("base", "a", *a.Record)
	r.c.advance(2 * time.Minute) // ring 0's canary still runs
	r.s.Announce(depIn("tenant", "b"), 0, r.ref)
	r.c.advance(3 * time.Second)
	if d := r.decide("tenant", "b", r.b); d.Transition != Wait {
		t.Fatalf("ring 1 while ring 0's canary runs: %+v; want it to wait", d)
	}
	r.waitAsking(20 * time.Second)
	passed := *a.Record
	passed.Canary, passed.State = CanaryPassed, Completed
	r.s.CanaryWritten(depIn("base", "a"), *a.Record, passed)
	r.s.Done(depIn("base", "a"))
	r.put("base", "a", passed)
	r.waitAsking(r.s.Policy.RingSettle - 24*time.Second) // to the settle's end
	r.c.advance(canaryWait)
	if d := r.decide("tenant", "b", r.b); d.Transition != Stamp || d.Record == nil || d.Record.Canary != CanaryRunning {
		t.Fatalf("ring 0's canary started 2m before ring 1's change was seen, passed after: ring 1 told %v %+v; want a canary of its own", d.Transition, d.Record)
	}
}

// haltsWhere is a HaltFinder with no halt in a workload's own namespace,
// whose Where is the function's.
type haltsWhere func(where func(string) bool) string

func (f haltsWhere) By(ctx context.Context, _ string, _ []Change) (string, error) { return "", nil }

func (f haltsWhere) Where(_ context.Context, _ []stamp.ObjectRef, where func(string) bool) (string, error) {
	return f(where), nil
}

// Rings.Of: the label where the selector lets it count.
func TestRingsOfHonoursTheSelector(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{}, ringed("base", 0), ringed("tenant", 1))
	sel, err := labels.Parse("owner=platform")
	if err != nil {
		t.Fatal(err)
	}
	rings := &Rings{Reader: s.Cache, Selector: sel}
	if ring, ok := rings.Of(t.Context(), "tenant"); !ok || ring != 1 {
		t.Fatalf("tenant: %d %v; want ring 1", ring, ok)
	}
	other, _ := labels.Parse("owner=someone-else")
	if _, ok := (&Rings{Reader: s.Cache, Selector: other}).Of(t.Context(), "tenant"); ok {
		t.Fatal("a namespace the selector leaves out is in a ring")
	}
	if _, ok := (*Rings)(nil).Of(t.Context(), "tenant"); ok {
		t.Fatal("no rings configured, yet a ring")
	}
}

// A copy of ring 1 written before ring 0's (a platform writes its copies one
// namespace after another): ring 1 waits the settle for ring 0's to come, then
// waits for ring 0 to roll it, as if they had come together.
func TestRingSettleWaitsForALaterLowerCopy(t *testing.T) {
	r := newRingScenario(t, "base-new", 1)
	r.s.Announce(depIn("tenant", "b"), 0, r.ref)
	r.c.advance(20 * time.Second) // past the debounce, ring 0 untouched so far
	if d := r.decide("tenant", "b", r.b); d.Transition != Wait || d.After <= 0 || d.After > canaryWait {
		t.Fatalf("ring 1 within the settle: %+v; want it to wait and ask again soon", d)
	}
	r.s.Announce(depIn("base", "a"), 0, r.ref) // ring 0's copy, 20 s later
	r.c.advance(3 * time.Second)
	if a := r.decide("base", "a", r.base); a.Transition != Stamp || a.Record.Canary != CanaryRunning {
		t.Fatalf("ring 0: %+v; want its canary", a)
	}
	r.c.advance(10 * time.Second) // past the settle: ring 0 rolls it, so ring 1 still waits
	if d := r.decide("tenant", "b", r.b); d.Transition != Wait {
		t.Fatalf("ring 1 past the settle while ring 0's canary runs: %+v; want it to wait", d)
	}
}
