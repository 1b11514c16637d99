package rollout

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Rings: a platform copies one config into many namespaces (trust-manager's
// Bundles, one GitOps manifest per tenant), and each copy changes at nearly
// the same moment. Without rings each namespace judges its copy's change
// alone: a bad value costs a canary pod in every namespace. With rings the
// platform orders the namespaces (LabelRing on the Namespace, 0 first), and
// for a workload of ring r > 0 whose change includes a source S (its kind and
// name), only S's name and what the lower rings do with their own S decide:
//
//   - it waits while a namespace of a lower ring rolls out a change of S
//     (ringWait), at most ringWaitFor from when its change was seen, and
//     at least Policy.RingSettle (the lower rings' copies may come later);
//   - a halt of S in force in ring 0 holds it like a halt of its own
//     namespace (Halts.By), whatever it references of S;
//   - it runs no canary of its own when a lower ring's canary of S passed
//     after its change was seen and no lower ring holds a halt of S
//     (ringProven); else it is its namespace's canary as without rings.
//
// Never what a workload's copy holds, nor whether it equals another
// namespace's: a tenant of a higher ring learns that ring 0 rolled or halted
// S, never what S holds there (no equality oracle). Halts in rings above 0
// stay in their namespace (and deny the rings above their skip of the canary):
// whoever can edit a ring-1 namespace halts nothing but its own.

// LabelRing (platform, on a Namespace): the namespace's ring, a whole number
// from 0 (first) to MaxRing. Namespace labels are not a tenant's to set
// (namespace `edit` grants no update of its Namespace);
// --ring-namespace-selector narrows which namespaces may be in a ring where
// tenants create and label namespaces (Capsule, HNC).
const LabelRing = "configstamp.io/ring"

// MaxRing is the highest ring.
const MaxRing = 99

// RingOf reads LabelRing from a namespace's labels: its ring, and whether it
// is in one. A value that is not a whole number from 0 to MaxRing is a
// Problem, and puts the namespace in no ring.
func RingOf(namespaceLabels map[string]string) (int, bool, *stamp.Problem) {
	v, ok := namespaceLabels[LabelRing]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > MaxRing {
		return 0, false, &stamp.Problem{Field: "namespace label " + LabelRing, Value: v,
			Message: fmt.Sprintf("is not a whole number from 0 to %d: the namespace is in no ring", MaxRing)}
	}
	return n, true, nil
}

// Rings finds the ring of a namespace. A nil *Rings puts none in a ring.
type Rings struct {
	// Reader reads Namespaces (the manager's cache).
	Reader client.Reader
	// Selector: only the namespaces whose labels it matches may be in a ring
	// (--ring-namespace-selector); nil: every namespace.
	Selector labels.Selector

	mu sync.Mutex
	// read: each namespace's ring as read last, and when (ringsFor).
	read map[string]ringRead
}

// ringRead is a namespace's ring (-1: none) read at at.
type ringRead struct {
	ring int
	at   time.Time
}

// ringsFor is how long Of reuses a namespace's ring: every workload of a
// ring that waits asks about the namespaces of the whole wave every
// canaryWait, and a cached Namespace is copied at each read.
const ringsFor = time.Second

// Of is namespace's ring, and whether it is in one: one that cannot be read,
// or that Selector leaves out, is not.
func (r *Rings) Of(ctx context.Context, namespace string) (int, bool) {
	if r == nil {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if last, ok := r.read[namespace]; ok && now.Sub(last.at) < ringsFor {
		return last.ring, last.ring >= 0
	}
	if len(r.read) >= maxRingReads {
		r.read = nil // namespaces come and go: start over rather than keep the gone
	}
	if r.read == nil {
		r.read = map[string]ringRead{}
	}
	ring := -1
	ns := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err == nil && (r.Selector == nil || r.Selector.Matches(labels.Set(ns.Labels))) {
		if n, ok, _ := RingOf(ns.Labels); ok {
			ring = n
		}
	}
	r.read[namespace] = ringRead{ring: ring, at: now}
	return ring, ring >= 0
}

// maxRingReads bounds the rings Of keeps.
const maxRingReads = 10000

// below returns whether a namespace is in a ring below ring.
func (r *Rings) below(ctx context.Context, ring int) func(namespace string) bool {
	return func(namespace string) bool {
		n, ringed := r.Of(ctx, namespace)
		return ringed && n < ring
	}
}

// ringWaitFor bounds how long a workload waits for the rings below it, from
// when its change was seen: a rollout's slot bound at the defaults. A lower
// ring that rolls longer (a long wave, a tenant of ring 1 changing its copy
// again and again) delays the rings above by no more; they then roll with
// canaries of their own.
func (s *Scheduler) ringWaitFor() time.Duration {
	return s.Policy.ProgressDeadline + s.Policy.VerifyWindow + slotGrace
}

// ringWait is how long k, about to roll out causes, waits for the rings
// below its namespace's: while a namespace of a lower ring rolls out a change
// of one of their sources (rollingWhere), within ringWaitFor from when k's
// change was seen; and, while none does, until Policy.RingSettle from then
// (the lower rings' copies may be written a little later than k's). 0: no
// ring below rolls it, k's namespace is in no ring or in ring 0.
func (s *Scheduler) ringWait(ctx context.Context, k Key, causes []Change) (time.Duration, error) {
	ring, ok := s.Rings.Of(ctx, k.Namespace)
	refs := refsOf(causes)
	if !ok || ring == 0 || len(refs) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	seen := s.seenAt(k)
	if !seen.IsZero() && now.After(seen.Add(s.ringWaitFor())) {
		return 0, nil
	}
	below := s.Rings.below(ctx, ring)
	rolling, err := s.rollingWhere(ctx, refs, now, func(j Key) bool { return j.Namespace != k.Namespace && below(j.Namespace) })
	switch {
	case err != nil:
		return 0, err
	case rolling:
		return canaryWait, nil
	case !seen.IsZero() && now.Before(seen.Add(s.Policy.RingSettle)):
		return min(canaryWait, seen.Add(s.Policy.RingSettle).Sub(now)), nil
	}
	return 0, nil
}

// seenAt is when k's change was seen (its wave entry's first change), or
// zero when it has none; s.mu held.
func (s *Scheduler) seenAt(k Key) time.Time {
	p := s.pending[k]
	if g, ok := s.granted[k]; p == nil && ok {
		p = g.entry
	}
	switch {
	case p == nil:
		return time.Time{}
	case p.announced:
		return p.seen
	}
	return p.first
}

// ringPass is a canary of a source that passed in a namespace: when it
// started (its record's) and when it passed.
type ringPass struct{ started, passed time.Time }

// ringProven reports whether a canary of ref passed in a ring below k's
// namespace's after k's change was seen, with no halt of ref in force in a
// ring below: k then rolls ref's change with the budget, no canary of its
// own. The canary must also have started at most Policy.RingSettle before
// k's change was seen: one that started earlier judged an earlier change of
// the lower ring's copy (a long canary still running when k's copy changed
// is no judge of k's change). Only passes this process saw count (after a
// restart each ring's namespaces have canaries of their own again); s.mu
// held.
func (s *Scheduler) ringProven(ctx context.Context, k Key, ref stamp.ObjectRef, now time.Time) (bool, error) {
	ring, ok := s.Rings.Of(ctx, k.Namespace)
	seen := s.seenAt(k)
	if !ok || ring == 0 || seen.IsZero() {
		return false, nil
	}
	below, passed := s.Rings.below(ctx, ring), false
	for ns, p := range s.refPassed[ref] {
		if now.Sub(p.passed) <= passedFor && !p.passed.Before(seen) && !p.started.Before(seen.Add(-s.Policy.RingSettle).Truncate(time.Second)) && below(ns) {
			passed = true
		}
	}
	if !passed || s.Halts == nil {
		return passed, nil
	}
	halt, err := s.Halts.Where(ctx, []stamp.ObjectRef{ref}, below)
	return halt == "", err
}
