package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/workload"
)

// RolloutPolicy spreads the rollouts of a shared change over time.
type RolloutPolicy struct {
	// Debounce is the quiet window: changes to a workload's sources closer
	// together than this give one rollout. 0 rolls at once.
	Debounce time.Duration
	// MaxWait bounds the debounce, so a source rewritten every second still rolls.
	MaxWait time.Duration
	// MaxConcurrent is the budget of workloads rolling at once (0: unlimited).
	MaxConcurrent int
	// PerSecond is the global rate of rollout starts (0: unlimited).
	PerSecond float64
	// ProgressDeadline fails a StatefulSet or DaemonSet rollout that has not
	// completed in this time (Deployments have their own progressDeadlineSeconds).
	ProgressDeadline time.Duration
	// HaltOnFailure stops the rollouts of a change that failed on one workload.
	HaltOnFailure bool
}

// Tracks reports whether rollouts are followed to completion (needed by the
// budget and by halting). Untracked, a stamp is all configstamp does.
func (p RolloutPolicy) Tracks() bool { return p.MaxConcurrent > 0 || p.HaltOnFailure }

// workloadKey names a workload across kinds.
type workloadKey struct{ Kind, Namespace, Name string }

func (k workloadKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

type debounceState struct {
	hash        string
	first, last time.Time
}

type waiter struct {
	priority    int
	first, seen time.Time
}

// gather is how long a workload waits for the other members of its wave to
// register before the wave order is applied: the workloads of one change are
// enqueued together and reach the scheduler within milliseconds.
const gather = 500 * time.Millisecond

// Scheduler decides when a workload that needs a rollout may have it: after
// its debounce window, within the budget of concurrent rollouts and the global
// rate, in wave order (priority, then namespace/name). It keeps only soft state:
// the rolling set is read from the cache (workloads carrying
// AnnotationRolloutStarted), so a new leader resumes where the old one stopped.
type Scheduler struct {
	Policy RolloutPolicy
	// Cache is read for the workloads currently rolling (IndexRolling).
	Cache client.Reader

	mu       sync.Mutex
	debounce map[workloadKey]*debounceState
	waiting  map[workloadKey]waiter
	// inflight: stamped by this process, maybe not yet visible in the cache.
	inflight map[workloadKey]time.Time
	limiter  *rate.Limiter
	now      func() time.Time
	// following: rollouts this process has seen under way (key -> started), so
	// that a completion is counted once and not again after a restart.
	following map[workloadKey]string
}

// NewScheduler returns a Scheduler for policy reading the cache.
func NewScheduler(policy RolloutPolicy, cache client.Reader) *Scheduler {
	limit := rate.Inf
	if policy.PerSecond > 0 {
		limit = rate.Limit(policy.PerSecond)
	}
	return &Scheduler{
		Policy: policy, Cache: cache,
		debounce:  map[workloadKey]*debounceState{},
		waiting:   map[workloadKey]waiter{},
		inflight:  map[workloadKey]time.Time{},
		following: map[workloadKey]string{},
		limiter:   rate.NewLimiter(limit, 1),
		now:       time.Now,
	}
}

// Debounce records that k needs hash and returns how long to wait before
// rolling: until window has passed since the last different hash, at most
// MaxWait after the first.
func (s *Scheduler) Debounce(k workloadKey, hash string, window time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st := s.debounce[k]
	if st == nil {
		st = &debounceState{first: now, last: now, hash: hash}
		s.debounce[k] = st
	} else if st.hash != hash {
		debouncedChanges.Inc()
		st.hash, st.last = hash, now
	}
	until := st.last.Add(window)
	if s.Policy.MaxWait > 0 {
		until = min64(until, st.first.Add(s.Policy.MaxWait))
	}
	return max(0, until.Sub(now))
}

func min64(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Acquire asks for a rollout slot for k. It returns 0 when k may roll now
// (the caller must then stamp it), or how long to wait before asking again.
func (s *Scheduler) Acquire(ctx context.Context, k workloadKey, priority int) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	w, ok := s.waiting[k]
	if !ok {
		w.first = now
	}
	w.priority, w.seen = priority, now
	s.waiting[k] = w
	defer func() { waitingWorkloads.Set(float64(len(s.waiting))) }()
	if s.Policy.MaxConcurrent > 0 || s.Policy.PerSecond > 0 {
		if waited := now.Sub(w.first); waited < gather {
			return gather - waited, nil
		}
	}

	if s.Policy.MaxConcurrent > 0 {
		rolling, err := s.rolling(ctx)
		if err != nil {
			return 0, err
		}
		for ik, at := range s.inflight {
			if rolling[ik] || now.Sub(at) > 30*time.Second {
				delete(s.inflight, ik) // the cache shows it now (or never will)
			} else {
				rolling[ik] = true
			}
		}
		free := s.Policy.MaxConcurrent - len(rolling)
		if rank := s.rank(k, now); rank >= free {
			// The budget is used up, or others come first in this wave: ask again
			// roughly when a slot may be ours, so a long wave does not spin.
			return min(time.Duration(rank/s.Policy.MaxConcurrent+1)*500*time.Millisecond, 5*time.Second), nil
		}
	}
	if r := s.limiter.ReserveN(now, 1); r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return max(r.DelayFrom(now), 50*time.Millisecond), nil
	}
	delete(s.waiting, k)
	delete(s.debounce, k)
	s.inflight[k] = now
	return 0, nil
}

// rank is k's place among the waiting workloads in wave order: higher priority
// first, then kind, namespace, name. Waiters not seen for a while are dropped.
func (s *Scheduler) rank(k workloadKey, now time.Time) int {
	keys := make([]workloadKey, 0, len(s.waiting))
	for wk, w := range s.waiting {
		if now.Sub(w.seen) > 10*time.Second {
			delete(s.waiting, wk)
			continue
		}
		keys = append(keys, wk)
	}
	slices.SortFunc(keys, func(a, b workloadKey) int {
		return cmp.Or(
			cmp.Compare(s.waiting[b].priority, s.waiting[a].priority),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Kind, b.Kind))
	})
	return slices.Index(keys, k)
}

// rolling returns the workloads currently holding a slot, from the cache.
func (s *Scheduler) rolling(ctx context.Context) (map[workloadKey]bool, error) {
	out := map[workloadKey]bool{}
	for _, kind := range workload.Kinds {
		list := kind.NewList()
		if err := s.Cache.List(ctx, list, client.MatchingFields{IndexRolling: "true"}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("while listing rolling %s: %w", kind.Resource, err)
		}
		for _, o := range kind.Items(list) {
			out[workloadKey{kind.Name, o.GetNamespace(), o.GetName()}] = true
		}
	}
	return out, nil
}

// Forget drops k's debounce and waiting state (it no longer needs a rollout).
func (s *Scheduler) Forget(k workloadKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.debounce, k)
	delete(s.waiting, k)
	waitingWorkloads.Set(float64(len(s.waiting)))
}

// Following records that k's rollout started at started is under way.
func (s *Scheduler) Following(k workloadKey, started string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.following[k] = started
}

// Finished records that k's rollout started at started is over and reports
// whether this process had seen it under way (so it is counted once).
func (s *Scheduler) Finished(k workloadKey, started string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, k)
	if s.following[k] != started {
		return false
	}
	delete(s.following, k)
	return true
}

// Release frees k's in-flight slot (its rollout finished).
func (s *Scheduler) Release(k workloadKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, k)
}
