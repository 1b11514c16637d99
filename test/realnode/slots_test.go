//go:build linux

package realnode_test

import (
	"flag"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The tests that run side by side (t.Parallel) take a slot each, at most
// CONFIGSTAMP_REALNODE_PARALLEL (make test: REALNODE_PARALLEL) at once, the
// longest first. go test's own -parallel releases the waiting tests in no
// useful order (in make test the two longest started last and alone made
// the lane's last minutes); make test passes a -parallel high enough that
// these slots are what bounds the lane. A waiting test is given a slot
// settle after it arrived at the earliest, so that the tests released at
// once by go test are all waiting when the first slots are given out.
// The order only decides when a test starts, never what it checks.

// expected is each side-by-side test's duration in a make test on a fresh
// machine (two cores): the order slots are given in. A test not listed
// counts as defaultExpected.
var expected = map[string]time.Duration{
	"TestSlowRolloutThatProgressesDoesNotFail":                                              445 * time.Second,
	"TestBadChangeCostsOnePodAtTheDefaults/a_crash_at_start":                                386 * time.Second,
	"TestBadChangeStopsAtTheFirstWorkload":                                                  321 * time.Second,
	"TestBadChangeCostsOnePodAtTheDefaults/Ready,_then_it_exits_20_s_later":                 222 * time.Second,
	"TestUndoReturnsToTheLastVerifiedRevision":                                              180 * time.Second,
	"TestEveryFailureFormIsCaughtAtTheDefaults/a_readiness_probe_flaps_on_the_value_(10_s)": 136 * time.Second,
	"TestBadChangeCostsOnePodAtTheDefaults/a_key_an_env_reference_needs_is_removed":         133 * time.Second,
	"TestStatefulSetAndDaemonSetCrash":                                                      44 * time.Second,
}

const (
	defaultExpected = 100 * time.Second
	settle          = time.Second
)

var realnodeSlots = &slots{limit: slotLimit()}

// slotLimit is CONFIGSTAMP_REALNODE_PARALLEL, else go test's -parallel.
func slotLimit() int {
	if n, err := strconv.Atoi(os.Getenv("CONFIGSTAMP_REALNODE_PARALLEL")); err == nil && n > 0 {
		return n
	}
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

type slots struct {
	mu      sync.Mutex
	limit   int
	running int
	waiting []*slotWaiter
}

type slotWaiter struct {
	expect time.Duration
	ready  chan struct{}
}

// take blocks until t has a slot, which it keeps until its cleanups (its
// configstamp's and namespace's, registered after this) have run.
func (s *slots) take(t *testing.T) {
	t.Helper()
	expect, ok := expected[t.Name()]
	if !ok {
		expect = defaultExpected
	}
	w := &slotWaiter{expect: expect, ready: make(chan struct{})}
	s.mu.Lock()
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	arrived := time.Now()
	time.AfterFunc(settle, s.give)
	<-w.ready
	t.Logf("slot taken after %s waiting (expected to run %s)", time.Since(arrived).Round(100*time.Millisecond), expect)
	t.Cleanup(func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
		s.give()
	})
}

// give hands the free slots to the waiting tests, longest first.
func (s *slots) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running < s.limit && len(s.waiting) > 0 {
		i := longest(s.waiting)
		close(s.waiting[i].ready)
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.running++
	}
}

// longest is the index of the waiter expected to take longest (the first
// of equals).
func longest(ws []*slotWaiter) int {
	best := 0
	for i, w := range ws {
		if w.expect > ws[best].expect {
			best = i
		}
	}
	return best
}
