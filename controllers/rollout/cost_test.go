package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// These tests pin down what the scheduler's cost-saving shortcuts must not
// change: who is woken, each workload's place in the wave, which records hold
// a slot.

// Closing a rollout wakes the next in line (Next). Unless a workload waits for
// a slot, there is nobody to wake, and it must not read the open records: in a
// wave of 1,000 with no budget that read, at every close, was 42% of
// configstamp's CPU.
func TestClosingReadsHoldersOnlyForSomeoneWaiting(t *testing.T) {
	for name, tc := range map[string]struct {
		policy Policy
		asks   int // workloads that ask before the close
	}{
		"no budget, one waiting for the rate": {Policy{PerSecond: 0.001, HaltOnFailure: true, ProgressDeadline: time.Minute}, 2},
		"a budget, nobody asking":             {Policy{MaxConcurrent: 2, HaltOnFailure: true, ProgressDeadline: time.Minute}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			s, _, lists := countingScheduler(t, tc.policy, testKeys, rollingDeployment("ns", "rolling", t0))
			s.Announce(dep("announced"), 0)                          // its reconcile has not asked yet
			s.Debounce(dep("debouncing"), "v1-x", time.Minute, 0, 0) // in its window
			for i := range tc.asks {
				if _, err := s.Acquire(t.Context(), dep(fmt.Sprintf("asks%d", i)), 0, true); err != nil {
					t.Fatal(err)
				}
			}
			*lists = 0
			if woken := s.Next(t.Context(), 2); len(woken) != 0 || *lists != 0 {
				t.Fatalf("closing one rollout woke %v and listed the open records %d times; want nobody woken, nothing read", woken, *lists)
			}
		})
	}
	t.Run("a budget, a workload waiting", func(t *testing.T) {
		s, _, lists := countingScheduler(t, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute}, testKeys, rollingDeployment("ns", "rolling", t0))
		if w, err := s.Acquire(t.Context(), dep("waiting"), 0, true); err != nil || w == 0 {
			t.Fatalf("Acquire with the only slot held: wait %v, err %v; want a wait", w, err)
		}
		*lists = 0
		if woken := s.Next(t.Context(), 2); !slices.Equal(woken, []Key{dep("waiting")}) || *lists == 0 {
			t.Fatalf("closing one rollout woke %v (read the open records: %v); want the waiting workload woken", woken, *lists > 0)
		}
	})
}

// rank counts a workload's place without sorting the candidates; it must be
// exactly its index in the wave order (order), for any mix of namespaces,
// priorities, debounce windows, stale entries and slots already held.
func TestRankIsThePlaceInTheOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	namespaces := []string{"a", "b", "c", "d"}
	for round := range 300 {
		s := &Scheduler{pending: map[Key]*pending{}}
		now := t0
		held := map[Key]bool{}
		for i := range rng.IntN(6) {
			held[depIn(namespaces[rng.IntN(len(namespaces))], fmt.Sprintf("h%d", i))] = true
		}
		for range 1 + rng.IntN(30) {
			k := Key{[]string{"Deployment", "StatefulSet"}[rng.IntN(2)], namespaces[rng.IntN(len(namespaces))], fmt.Sprintf("w%d", rng.IntN(12))}
			p := &pending{priority: rng.IntN(3), announced: rng.IntN(4) == 0, seen: now}
			switch rng.IntN(5) {
			case 0: // debouncing, beyond upcoming
				p.readyAt = now.Add(upcoming + time.Duration(1+rng.IntN(1000))*time.Millisecond)
			case 1: // debouncing, within upcoming
				p.readyAt = now.Add(time.Duration(rng.IntN(int(upcoming/time.Millisecond))) * time.Millisecond)
			case 2: // stale
				p.seen, p.readyAt = now.Add(-forgetAfter-time.Second), now.Add(-forgetAfter-time.Second)
			default:
				p.readyAt = now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond)
			}
			s.pending[k] = p
		}
		order := s.order(held, now)
		for k := range s.pending {
			if got, want := s.rank(k, held, now), slices.Index(order, k); got != want {
				t.Fatalf("round %d: rank(%v) = %d, its place in the order %v is %d", round, k, got, order, want)
			}
		}
	}
}

// mapKeys is a set of installation keys by id that a test can change.
type mapKeys map[string]*stamp.Hasher

func (m mapKeys) ByID(id string) *stamp.Hasher { return m[id] }

// holders reuses the seal check of an open record while nothing it depends on
// changed; a closed record, and a record whose key configstamp no longer has,
// hold no slot at the next read.
func TestHoldersRecheckSeals(t *testing.T) {
	key := stamp.NewHasher([]byte("a key of thirty-two bytes, exact"))
	keys := mapKeys{key.KeyID(): key}
	open := func(name string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
		return sealed(d, StartRecord(t0, nil, false), key)
	}
	s, _, _ := countingScheduler(t, Policy{MaxConcurrent: 5, ProgressDeadline: time.Minute}, keys, open("a"), open("b"))
	slots := func(want int, when string) {
		t.Helper()
		if n, err := s.SlotsInUse(t.Context()); err != nil || n != want {
			t.Fatalf("%s: slots in use %d (err %v), want %d", when, n, err, want)
		}
	}
	slots(2, "two open records")
	slots(2, "read again, nothing changed")

	a := &appsv1.Deployment{}
	if err := s.Cache.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "a"}, a); err != nil {
		t.Fatal(err)
	}
	closed := sealed(a, StartRecord(t0, nil, false).Complete(""), key)
	closed.Annotations[AnnotationState] = string(Rolling) // a hand edit: the seal no longer matches
	if err := s.Cache.(client.Client).Update(t.Context(), closed); err != nil {
		t.Fatal(err)
	}
	slots(1, "a's record reopened by hand (its seal no longer matches)")

	delete(keys, key.KeyID())
	slots(0, "with the key that sealed b gone")
	keys[key.KeyID()] = stamp.NewHasher([]byte("a key of thirty-two bytes, exact"))
	slots(1, "with that key back")
}

// Between prunes (at most every pruneEvery) a stale entry is dropped when it
// is looked up: a workload that changes again long after its last window gets
// a new window, not the end of the old one (which MaxWait would cut to 0).
func TestStaleEntryIsDroppedOnLookup(t *testing.T) {
	s, c := newTestScheduler(t, Policy{MaxWait: 10 * time.Second, ProgressDeadline: time.Minute})
	k := dep("a")
	if w := s.Debounce(k, "v1-1", 2*time.Second, 0, 0); w != 2*time.Second {
		t.Fatalf("first change: wait %v, want the window", w)
	}
	c.advance(forgetAfter + 3*time.Second) // the entry is stale; nothing has pruned it since
	if w := s.Debounce(k, "v1-2", 2*time.Second, 0, 0); w != 2*time.Second {
		t.Fatalf("a change long after the last window: wait %v, want a new window of 2s", w)
	}
}
