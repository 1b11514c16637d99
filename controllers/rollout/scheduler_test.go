package rollout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func dep(name string) Key       { return Key{"Deployment", "ns", name} }
func depIn(ns, name string) Key { return Key{"Deployment", ns, name} }

// rollingDeployment is a Deployment whose record, sealed by configstamp, is
// open since started.
func rollingDeployment(ns, name string, started time.Time) client.Object {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}}
	return sealed(d, StartRecord(started, nil, false), testKeys.Current())
}

func withAnnotation(o client.Object, k, v string) client.Object {
	a := o.GetAnnotations()
	a[k] = v
	o.SetAnnotations(a)
	return o
}

func newTestScheduler(t *testing.T, policy Policy, rolling ...client.Object) (*Scheduler, *clock) {
	t.Helper()
	s, c, _ := countingScheduler(t, policy, testKeys, rolling...)
	return s, c
}

// countingScheduler is a Scheduler with keys over a cache of rolling, on a
// test clock at t0; the cache counts its List calls (holders reads the open
// records with one List per kind).
func countingScheduler(t *testing.T, policy Policy, keys Keys, rolling ...client.Object) (*Scheduler, *clock, *int) {
	t.Helper()
	lists := 0
	b := fake.NewClientBuilder().WithObjects(rolling...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, list, opts...)
		},
	})
	for _, k := range workload.NewRegistry().All() {
		b = b.WithIndex(k.New(), IndexRolling, IndexRollingFunc).WithIndex(k.New(), IndexPassed, IndexPassedFunc)
	}
	s := NewScheduler(policy, b.Build(), keys, workload.NewRegistry())
	c := &clock{t: t0}
	s.now = c.now
	return s, c, &lists
}

func TestDebounce(t *testing.T) {
	s, c := newTestScheduler(t, Policy{MaxWait: 10 * time.Second})
	k := dep("a")
	if w := s.Debounce(k, "v1-1", 2*time.Second, 0, 0); w != 2*time.Second {
		t.Fatalf("first change: wait %v, want the whole window", w)
	}
	c.advance(1500 * time.Millisecond)
	if w := s.Debounce(k, "v1-2", 2*time.Second, 0, 0); w != 2*time.Second {
		t.Fatalf("a second change restarts the window: wait %v", w)
	}
	c.advance(2 * time.Second)
	if w := s.Debounce(k, "v1-2", 2*time.Second, 0, 0); w != 0 {
		t.Fatalf("quiet for the window: wait %v, want 0", w)
	}
	// A source rewritten every second still rolls after MaxWait.
	k = dep("b")
	for i := 0; i < 9; i++ {
		s.Debounce(k, fmt.Sprintf("v1-%d", i), 2*time.Second, 0, 0)
		c.advance(time.Second)
	}
	if w := s.Debounce(k, "v1-z", 2*time.Second, 0, 0); w != time.Second {
		t.Fatalf("after 9s of changes with MaxWait 10s: wait %v, want 1s", w)
	}
}

func TestAcquireWithFreeSlotsDoesNotWait(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute})
	// A single change with free slots rolls at once: no gather delay.
	if w, err := s.Acquire(t.Context(), dep("a"), 0, true); err != nil || w != 0 {
		t.Fatalf("a single waiter with 10 free slots: wait %v err %v, want 0", w, err)
	}
}

func TestAcquireBudgetAndOrder(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 2, ProgressDeadline: time.Minute}, rollingDeployment("ns", "busy", t0))
	ctx := t.Context()
	// The change reaches four workloads; "p" has a higher priority. All are
	// announced before any asks, so the order is known from the start.
	for _, n := range []string{"c", "b", "a"} {
		s.Announce(dep(n), 0)
	}
	s.Announce(dep("p"), 5)
	// One slot is taken by "busy" (from the cache), one is free: p goes first.
	for _, n := range []string{"a", "b", "c"} {
		if w, _ := s.Acquire(ctx, dep(n), 0, true); w == 0 {
			t.Fatalf("%s granted ahead of the higher-priority p", n)
		}
	}
	if w, _ := s.Acquire(ctx, dep("p"), 5, true); w != 0 {
		t.Fatalf("p not granted: wait %v", w)
	}
	// p is now in flight: the budget of 2 is used up.
	if w, _ := s.Acquire(ctx, dep("a"), 0, true); w == 0 {
		t.Fatal("a granted beyond the budget")
	}
	s.Done(dep("p")) // its rollout is over
	if w, _ := s.Acquire(ctx, dep("b"), 0, true); w == 0 {
		t.Fatal("b granted ahead of a")
	}
	if w, _ := s.Acquire(ctx, dep("a"), 0, true); w != 0 {
		t.Fatalf("a not granted after a slot was released: wait %v", w)
	}
}

func TestNothingToWaitForNeedsNoSlot(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute}, rollingDeployment("ns", "busy", t0))
	if w, _ := s.Acquire(t.Context(), dep("a"), 0, true); w == 0 {
		t.Fatal("granted a slot beyond the budget")
	}
	if w, _ := s.Acquire(t.Context(), Key{"StatefulSet", "ns", "ondelete"}, 0, false); w != 0 {
		t.Fatalf("an OnDelete workload waited %v for a slot it does not need", w)
	}
	if n, _ := s.SlotsInUse(t.Context()); n != 1 {
		t.Fatalf("slots in use %d, want 1 (the OnDelete rollout holds none)", n)
	}
}

// An open record past the progress deadline keeps its slot until configstamp
// closes it: the rollout's failure and its halt are written in one patch, and
// only then is the slot given back, so no second workload is stamped with the
// failed change in between. (It used to give its slot back at the deadline by
// itself; that let the next workload roll the failed change before the halt
// was written.)
func TestSlotKeptPastProgressDeadlineUntilClosed(t *testing.T) {
	stuck := rollingDeployment("tenant", "stuck", t0)
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: 30 * time.Second}, stuck)
	if w, _ := s.Acquire(t.Context(), depIn("other", "a"), 0, true); w == 0 {
		t.Fatal("granted while the only slot is held")
	}
	c.advance(31 * time.Second)
	if n, _ := s.SlotsInUse(t.Context()); n != 1 {
		t.Fatalf("an open record past the progress deadline, not closed yet, holds no slot (%d in use)", n)
	}
	if w, _ := s.Acquire(t.Context(), depIn("other", "a"), 0, true); w == 0 {
		t.Fatal("granted before the stuck rollout's failure (and halt) was written")
	}
	// configstamp closes it, failed and halting, in one write.
	cache := s.Cache.(client.Client)
	if err := cache.Get(t.Context(), client.ObjectKeyFromObject(stuck), stuck); err != nil {
		t.Fatal(err)
	}
	rec, err := Unseal(stuck, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Update(t.Context(), sealed(stuck, rec.Fail(true), testKeys.Current())); err != nil {
		t.Fatal(err)
	}
	if w, _ := s.Acquire(t.Context(), depIn("other", "a"), 0, true); w != 0 {
		t.Fatalf("not granted once the stuck rollout was closed: wait %v", w)
	}
}

// Which open records in the cache hold a slot: only those configstamp sealed,
// in this installation's scope, started neither in the future (beyond clock
// skew) nor so long ago that configstamp must have been unable to close them
// (past the deadline and closeGrace).
func TestHolders(t *testing.T) {
	const deadline = time.Minute
	unsealed := func(started time.Time) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "forged", UID: "uid-forged",
			Annotations: map[string]string{AnnotationState: string(Rolling), AnnotationStarted: started.Format(time.RFC3339)}}}
	}
	copied := func() client.Object {
		o := rollingDeployment("ns", "original", t0)
		o.SetName("copy")
		o.SetUID("uid-copy")
		return o
	}
	closed := func() client.Object {
		return sealed(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "done", UID: "uid-done"}},
			StartRecord(t0, nil, false).Complete(""), testKeys.Current())
	}
	tests := map[string]struct {
		obj     client.Object
		after   time.Duration // from t0
		inScope func(ctx context.Context, ns string) bool
		held    int
	}{
		"open, within the deadline":           {obj: rollingDeployment("ns", "a", t0), after: 10 * time.Second, held: 1},
		"open, past the deadline, not closed": {obj: rollingDeployment("ns", "a", t0), after: deadline + time.Second, held: 1},
		"open, just within its bound":         {obj: rollingDeployment("ns", "a", t0), after: deadline + slotGrace - time.Second, held: 1},
		"open, past its bound":                {obj: rollingDeployment("ns", "a", t0), after: deadline + slotGrace + time.Second, held: 0},
		"open, its window counts in its bound": {obj: withAnnotation(rollingDeployment("ns", "a", t0), AnnotationVerifyWindow, "5m"),
			after: deadline + 5*time.Minute + slotGrace - time.Second, held: 1},
		"open, started within clock skew ahead": {obj: rollingDeployment("ns", "a", t0.Add(30*time.Second)), held: 1},
		"open, sealed, started in 2099":         {obj: rollingDeployment("ns", "a", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)), held: 0},
		"closed":                                {obj: closed(), held: 0},
		"unsealed rolling, started in 2099":     {obj: unsealed(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)), held: 0},
		"unsealed rolling, started now":         {obj: unsealed(t0), held: 0},
		"copied from another workload":          {obj: copied(), held: 0},
		"in scope": {obj: rollingDeployment("mine", "a", t0), held: 1,
			inScope: func(_ context.Context, ns string) bool { return ns == "mine" }},
		"another installation's namespace": {obj: rollingDeployment("theirs", "a", t0), held: 0,
			inScope: func(_ context.Context, ns string) bool { return ns == "mine" }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: deadline}, tc.obj)
			s.InScope = tc.inScope
			c.advance(tc.after)
			if n, err := s.SlotsInUse(t.Context()); err != nil || n != tc.held {
				t.Fatalf("slots in use %d (err %v), want %d", n, err, tc.held)
			}
			w, err := s.Acquire(t.Context(), depIn("other", "next"), 0, true)
			if err != nil || (w == 0) != (tc.held == 0) {
				t.Fatalf("Acquire with the only slot held=%v: wait %v err %v", tc.held == 1, w, err)
			}
		})
	}
}

func TestNamespacesShareTheBudget(t *testing.T) {
	// The busy namespace already holds one of two slots and has many waiters
	// with a huge priority; the quiet namespace's single waiter is next.
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 2, ProgressDeadline: time.Minute}, rollingDeployment("busy", "x", t0))
	for i := 0; i < 5; i++ {
		s.Announce(depIn("busy", fmt.Sprintf("w%d", i)), 1000)
	}
	s.Announce(depIn("quiet", "q"), 0)
	if w, _ := s.Acquire(t.Context(), depIn("busy", "w0"), 1000, true); w == 0 {
		t.Fatal("the busy namespace's priority took the slot ahead of the quiet namespace's first workload")
	}
	if w, _ := s.Acquire(t.Context(), depIn("quiet", "q"), 0, true); w != 0 {
		t.Fatalf("the quiet namespace waited %v", w)
	}
}

func TestUpcomingDebounceCountsForTheOrder(t *testing.T) {
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute})
	// Both leave a 2s debounce window together; the canary has the higher priority.
	s.Debounce(dep("app"), "v1-a", 2*time.Second, 0, 0)
	s.Debounce(dep("canary"), "v1-a", 2*time.Second, 10, 0)
	c.advance(2 * time.Second)
	if w, _ := s.Acquire(t.Context(), dep("app"), 0, true); w == 0 {
		t.Fatal("app took the slot although the canary leaves its window at the same moment")
	}
	if w, _ := s.Acquire(t.Context(), dep("canary"), 10, true); w != 0 {
		t.Fatalf("canary waited %v", w)
	}
}

func TestAcquireRate(t *testing.T) {
	s, c := newTestScheduler(t, Policy{PerSecond: 1})
	ctx := t.Context()
	if w, _ := s.Acquire(ctx, dep("a"), 0, true); w != 0 {
		t.Fatalf("a: wait %v", w)
	}
	if w, _ := s.Acquire(ctx, dep("b"), 0, true); w == 0 {
		t.Fatal("b granted in the same second at 1 per second")
	}
	c.advance(time.Second)
	if w, _ := s.Acquire(ctx, dep("b"), 0, true); w != 0 {
		t.Fatalf("b: wait %v a second later", w)
	}
}

func TestHaltedWaitersAreToldOnceAndWoken(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{})
	if !s.NoteHalted(dep("a"), "ConfigMap/shared@x", 0) || s.NoteHalted(dep("a"), "ConfigMap/shared@x", 0) {
		t.Fatal("a waiter must be told once per halted change")
	}
	s.NoteHalted(dep("b"), "ConfigMap/other@y", 0)
	if got := s.Lifted([]string{"ConfigMap/shared@x"}); len(got) != 1 || got[0] != dep("a") {
		t.Fatalf("waiters of the lifted change: %v, want [a]", got)
	}
	s.ClearHalted(dep("a"))
	if got := s.Lifted([]string{"ConfigMap/shared@x"}); len(got) != 0 {
		t.Fatalf("cleared waiter still listed: %v", got)
	}
}

// When a halt lifts, its waiters resume in wave order: the one with the
// higher priority first, whichever asks first.
func TestLiftedHaltResumesInPriorityOrder(t *testing.T) {
	s, _ := newTestScheduler(t, Policy{MaxConcurrent: 1})
	ctx := t.Context()
	const change = "ConfigMap/shared@x"
	s.NoteHalted(dep("low"), change, 0)
	s.NoteHalted(dep("high"), change, 5)
	if got := s.Lifted([]string{change}); len(got) != 2 {
		t.Fatalf("waiters: %v", got)
	}
	if w, _ := s.Acquire(ctx, dep("low"), 0, true); w == 0 {
		t.Fatal("the low-priority waiter asked first and took the only slot before the high-priority one")
	}
	if w, _ := s.Acquire(ctx, dep("high"), 5, true); w != 0 {
		t.Fatalf("high: wait %v", w)
	}
}

func TestPolicyValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		p  Policy
		ok bool
	}{
		"defaults":               {Policy{Debounce: 2 * time.Second, MaxWait: 30 * time.Second, MaxConcurrent: 10, ProgressDeadline: 10 * time.Minute}, true},
		"zero progress deadline": {Policy{ProgressDeadline: 0}, false},
		"negative deadline":      {Policy{ProgressDeadline: -time.Second}, false},
		"negative debounce":      {Policy{ProgressDeadline: time.Minute, Debounce: -1}, false},
		"negative budget":        {Policy{ProgressDeadline: time.Minute, MaxConcurrent: -1}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", name, err, tc.ok)
		}
	}
}

// The pending gauge (what test/framework's WaitIdle waits for) drops when a
// stale entry is pruned, not only on the next Debounce or Acquire.
func TestPendingGaugeFollowsPruning(t *testing.T) {
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute})
	s.Announce(dep("gone"), 0) // deleted before its reconcile ran
	if v := testutil.ToFloat64(pendingWorkloads); v != 1 {
		t.Fatalf("pending gauge %v after an announcement, want 1", v)
	}
	c.advance(forgetAfter + time.Second)
	s.Next(t.Context(), 1)
	if v := testutil.ToFloat64(pendingWorkloads); v != 0 {
		t.Fatalf("pending gauge %v after the stale entry was pruned, want 0", v)
	}
}

// A change still rolls elsewhere while another workload of the namespace
// waits to roll it (announced, debouncing, waiting for a slot) or holds a
// slot with a rollout of it; then a completed workload is watched for crashes.
func TestOngoing(t *testing.T) {
	shared := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}
	other := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "other"}
	causes := []Change{{Ref: shared, Content: "00aa"}}
	rollingWith := func(ns, name string, ref stamp.ObjectRef) client.Object {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}}
		return sealed(d, StartRecord(t0, []Change{{Ref: ref, Content: "00bb"}}, false), testKeys.Current())
	}
	tests := map[string]struct {
		rolling  []client.Object
		announce func(s *Scheduler)
		want     bool
	}{
		"nothing else":                          {want: false},
		"another announced for the same source": {announce: func(s *Scheduler) { s.Announce(dep("b"), 0, shared) }, want: true},
		"another announced for another source":  {announce: func(s *Scheduler) { s.Announce(dep("b"), 0, other) }, want: false},
		"the same source in another namespace":  {announce: func(s *Scheduler) { s.Announce(depIn("elsewhere", "b"), 0, shared) }, want: false},
		"only itself announced":                 {announce: func(s *Scheduler) { s.Announce(dep("w"), 0, shared) }, want: false},
		"another rolling the same source":       {rolling: []client.Object{rollingWith("ns", "b", shared)}, want: true},
		"another rolling another source":        {rolling: []client.Object{rollingWith("ns", "b", other)}, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute}, tc.rolling...)
			if tc.announce != nil {
				tc.announce(s)
			}
			if got := s.Ongoing(t.Context(), dep("w"), causes); got != tc.want {
				t.Fatalf("Ongoing = %v, want %v", got, tc.want)
			}
		})
	}
}

// A workload announced for a change whose reconcile never asked loses its
// place in the wave after forgetAfter, and the scheduler says so: the
// trace of a reconcile that did not run (the wave-order failures of the
// real-node runs left no line for the workload that lost its place).
func TestAnAnnouncedWorkloadThatNeverAsksIsSaid(t *testing.T) {
	s, c := newTestScheduler(t, Policy{MaxConcurrent: 10, ProgressDeadline: time.Minute})
	var said []string
	s.Log = funcr.New(func(prefix, args string) { said = append(said, args) }, funcr.Options{})
	s.Announce(dep("quiet"), 0)
	s.Announce(dep("asks"), 0)
	c.advance(5 * time.Second)
	s.Debounce(dep("asks"), "v1-x", 2*time.Second, 0, 0)
	c.advance(forgetAfter + time.Second)
	if s.entry(dep("quiet"), c.now()) != nil {
		t.Fatal("quiet still has its place after forgetAfter")
	}
	if len(said) != 1 || !strings.Contains(said[0], "Deployment ns/quiet") {
		t.Fatalf("said %q, want one line naming Deployment ns/quiet", said)
	}
}
