package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func dep(name string) workloadKey        { return workloadKey{"Deployment", "ns", name} }
func rollingDeployment(name string) client.Object {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Annotations: map[string]string{stamp.AnnotationRolloutStarted: "2026-01-01T00:00:00Z"}}}
}

func newTestScheduler(t *testing.T, policy RolloutPolicy, rolling ...client.Object) (*Scheduler, *clock) {
	t.Helper()
	b := fake.NewClientBuilder().WithObjects(rolling...)
	for _, k := range workload.Kinds {
		b = b.WithIndex(k.New(), IndexRolling, indexRolling)
	}
	s := NewScheduler(policy, b.Build())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = c.now
	return s, c
}

func TestDebounce(t *testing.T) {
	s, c := newTestScheduler(t, RolloutPolicy{MaxWait: 10 * time.Second})
	k := dep("a")
	if w := s.Debounce(k, "v1-1", 2*time.Second); w != 2*time.Second {
		t.Fatalf("first change: wait %v, want the whole window", w)
	}
	c.advance(1500 * time.Millisecond)
	if w := s.Debounce(k, "v1-2", 2*time.Second); w != 2*time.Second {
		t.Fatalf("a second change restarts the window: wait %v", w)
	}
	c.advance(2 * time.Second)
	if w := s.Debounce(k, "v1-2", 2*time.Second); w != 0 {
		t.Fatalf("quiet for the window: wait %v, want 0", w)
	}
	// A source rewritten every second still rolls after MaxWait.
	k = dep("b")
	for i := 0; i < 9; i++ {
		s.Debounce(k, "v1-"+string(rune('a'+i)), 2*time.Second)
		c.advance(time.Second)
	}
	if w := s.Debounce(k, "v1-z", 2*time.Second); w != time.Second {
		t.Fatalf("after 9s of changes with MaxWait 10s: wait %v, want 1s", w)
	}
}

func TestAcquireBudgetAndOrder(t *testing.T) {
	s, c := newTestScheduler(t, RolloutPolicy{MaxConcurrent: 2}, rollingDeployment("busy"))
	ctx := t.Context()
	// Three waiters arrive in reverse order; "p" has a higher priority.
	for _, n := range []string{"c", "b", "a"} {
		if w, err := s.Acquire(ctx, dep(n), 0); err != nil || w == 0 {
			t.Fatalf("%s granted before the gather window: wait %v err %v", n, w, err)
		}
	}
	if w, _ := s.Acquire(ctx, dep("p"), 5); w == 0 {
		t.Fatal("p granted before the gather window")
	}
	c.advance(gather)
	// One slot is taken by "busy" (from the cache), one is free: p goes first.
	for _, n := range []string{"a", "b", "c"} {
		if w, _ := s.Acquire(ctx, dep(n), 0); w == 0 {
			t.Fatalf("%s granted ahead of the higher-priority p", n)
		}
	}
	if w, _ := s.Acquire(ctx, dep("p"), 5); w != 0 {
		t.Fatalf("p not granted: wait %v", w)
	}
	// p is now in flight: the budget of 2 is used up.
	if w, _ := s.Acquire(ctx, dep("a"), 0); w == 0 {
		t.Fatal("a granted beyond the budget")
	}
	s.Release(dep("p"))
	if w, _ := s.Acquire(ctx, dep("b"), 0); w == 0 {
		t.Fatal("b granted ahead of a")
	}
	if w, _ := s.Acquire(ctx, dep("a"), 0); w != 0 {
		t.Fatalf("a not granted after a slot was released: wait %v", w)
	}
}

func TestAcquireRate(t *testing.T) {
	s, c := newTestScheduler(t, RolloutPolicy{PerSecond: 1})
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := s.Acquire(ctx, dep(n), 0); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(gather)
	if w, _ := s.Acquire(ctx, dep("a"), 0); w != 0 {
		t.Fatalf("a: wait %v", w)
	}
	if w, _ := s.Acquire(ctx, dep("b"), 0); w == 0 {
		t.Fatal("b granted in the same second at 1 per second")
	}
	c.advance(time.Second)
	if w, _ := s.Acquire(ctx, dep("b"), 0); w != 0 {
		t.Fatalf("b: wait %v a second later", w)
	}
}
