package rollout

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// IndexRolling indexes workloads whose record is open (AnnotationState
// rolling) and carries a seal, value "true". The seal is verified where the
// index is read (holders), with the keys known then: an index value is made
// once per object version, and a replica may learn a key after it indexed a
// record sealed with it. Whether an open record still holds a slot also
// depends on the time and the scope, which an index cannot say either.
const IndexRolling = "configstamp.io/rolling"

// IndexRollingFunc is the index function of IndexRolling.
func IndexRollingFunc(obj client.Object) []string {
	a := obj.GetAnnotations()
	if _, sealed := a[AnnotationSeal]; sealed && Read(a).Open() {
		return []string{"true"}
	}
	return nil
}

// Bounds of an open record's slot: a record started later than clockSkew
// from now holds none; one older than its bound (SlotBound) holds none. The
// grace is the time configstamp has to write a rollout's end (its failure
// and its halt, in one patch) once its deadline or window is over, before
// the slot goes back by itself.
const (
	clockSkew = time.Minute
	slotGrace = time.Minute
)

// Policy spreads the rollouts of a shared change over time.
type Policy struct {
	// Debounce is the quiet window: changes to a workload's sources closer
	// together than this give one rollout. 0 rolls at once.
	Debounce time.Duration
	// MaxWait bounds the debounce, so a source rewritten every second still rolls.
	MaxWait time.Duration
	// MaxConcurrent is the budget of workloads rolling at once (0: unlimited).
	MaxConcurrent int
	// PerSecond is the global rate of rollout starts (0: unlimited).
	PerSecond float64
	// ProgressDeadline: a rollout not complete after this has failed, whatever
	// the kind and its own deadline, and holds no slot any longer.
	ProgressDeadline time.Duration
	// HaltOnFailure stops the rollouts of a change that failed on one workload.
	HaltOnFailure bool
	// UndoOnFailure returns a pinned workload whose rollout failed to its
	// previous revision, unless its AnnotationOnFailure says "halt".
	UndoOnFailure bool
	// VerifyWindow: how long the new revision of a rollout that is complete
	// must stay healthy (Ready, no restart) before it counts as completed; a
	// workload's AnnotationVerifyWindow overrides it. 0: completed at once.
	VerifyWindow time.Duration
	// RingSettle: how long a workload of a ring above 0 waits, from when its
	// change was seen, for the lower rings' copies to change too (a
	// platform writes its copies one namespace after another), before it
	// rolls with a canary of its own (Rings).
	RingSettle time.Duration
	// Canary: the first workload of a change's wave is its canary (held at
	// one new pod where its kind allows), and the rest waits for it to pass;
	// AnnotationCanaryOpt overrides it. Needs rollouts followed (Tracks).
	Canary bool
}

// Validate rejects settings that would make every rollout fail at once or
// that mean nothing.
func (p Policy) Validate() error {
	switch {
	case p.ProgressDeadline <= 0:
		return fmt.Errorf("--progress-deadline must be positive, not %v: a rollout configstamp follows fails when it is not complete by then", p.ProgressDeadline)
	case p.Debounce < 0 || p.MaxWait < 0 || p.RingSettle < 0:
		return fmt.Errorf("--debounce (%v), --debounce-max-wait (%v) and --ring-settle (%v) must not be negative", p.Debounce, p.MaxWait, p.RingSettle)
	case p.VerifyWindow < 0 || p.VerifyWindow > MaxVerifyWindow:
		return fmt.Errorf("--verify-window must be between 0 and %v, not %v", MaxVerifyWindow, p.VerifyWindow)
	case p.MaxConcurrent < 0 || p.PerSecond < 0:
		return fmt.Errorf("--max-concurrent-rollouts (%d) and --max-rollouts-per-second (%v) must not be negative", p.MaxConcurrent, p.PerSecond)
	}
	return nil
}

// Tracks reports whether rollouts are followed to completion (needed by the
// budget and by halting). Untracked, a stamp is all configstamp does.
func (p Policy) Tracks() bool { return p.MaxConcurrent > 0 || p.HaltOnFailure }

// Key names a workload across kinds.
type Key struct{ Kind, Namespace, Name string }

func (k Key) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// pending is a workload that needs, or may soon need, a rollout.
type pending struct {
	priority int
	// announced only: a source it references changed and its reconcile is
	// queued; it has not said yet whether it needs a rollout.
	announced bool
	// the debounce window: the hash wanted, the first and the latest change.
	hash        string
	first, last time.Time
	// readyAt: when it will ask for a slot (the end of its debounce window).
	readyAt time.Time
	seen    time.Time
	// refs: the sources whose change it waits to roll out (none known: any).
	refs []stamp.ObjectRef
	// idle: it can make no pod of the change now (workload.Status.Idle): never
	// the change's canary, so no other waits for it to be (canaryAhead).
	idle bool
	// cost: the pods a canary of it runs the change on
	// (workload.Status.CanaryPods), known once it asked (wants).
	cost int64
}

// concerns reports whether p waits to roll out a change of one of refs
// (an entry that does not say which changes it waits for concerns none).
func (p *pending) concerns(refs []stamp.ObjectRef) bool {
	for _, r := range p.refs {
		if slices.Contains(refs, r) {
			return true
		}
	}
	return false
}

// upcoming is how far ahead a workload still debouncing counts for the wave
// order: the members of one change leave their debounce windows together.
const upcoming = 500 * time.Millisecond

// forgetAfter drops pending entries whose reconcile stopped asking (deleted,
// or no longer in need and never told).
const forgetAfter = 10 * time.Second

// Scheduler decides when a workload that needs a rollout may have it: after
// its debounce window, within the budget of concurrent rollouts and the global
// rate, in wave order. It keeps only soft state: the rolling set is read from
// the cache (open records, IndexRolling), so a new leader resumes where the
// old one stopped.
//
// Wave order: within a namespace, higher configstamp.io/rollout-priority
// first, then name; across namespaces, fair shares: a namespace's n-th waiting
// workload comes after every other namespace's (n-1)-th, counting the slots
// the namespace already holds. So a tenant's priorities order only its own
// workloads, and a namespace with many workloads cannot keep the others out.
type Scheduler struct {
	Policy Policy
	// Cache is read for the workloads currently rolling (IndexRolling).
	Cache client.Reader
	// Keys verifies the seals of the records read from the cache.
	Keys Keys
	// Kinds are the kinds of workloads that hold slots.
	Kinds *workload.Registry
	// InScope says whether a namespace is this installation's; open records
	// elsewhere (another installation's) hold none of its slots. Nil: all.
	InScope func(ctx context.Context, namespace string) bool
	// Halts finds the halted changes that hold a rollout (nil: none).
	Halts HaltFinder
	// Rings orders namespaces that judge a change of a source of the same
	// name once (nil: each namespace alone).
	Rings *Rings
	// Log says when a workload announced for a change never asked within
	// forgetAfter, and lost its place in the wave: a sign that its
	// reconcile did not run (the zero Logger: not said).
	Log logr.Logger

	mu      sync.Mutex
	pending map[Key]*pending
	// inflight: stamped by this process, maybe not yet visible in the cache.
	inflight map[Key]time.Time
	// granted: the wave entries Acquire took out of pending for a stamp, and
	// when; Release puts one back when its stamp did not happen.
	granted map[Key]grant
	// halted: workloads told that they wait on a halted change, which, and
	// their priorities (announced again when the halt lifts).
	halted map[Key]haltedOn
	// seals: the last seal check of each open record, reused while the
	// object's UID and resourceVersion and the key its seal names are the same.
	seals map[Key]sealCheck
	// progress: the status of each open rollout as last seen, and when it
	// last changed (its progress deadline counts from then).
	progress map[Key]progressMark
	// held, heldAt: what holders found last, and when (recentHolders).
	held   map[Key]bool
	heldAt time.Time
	// suspects: completed workloads with a pod not Ready while their change
	// still rolls elsewhere, the sources of that change, until when the
	// rest of it waits for their judgement.
	suspects map[Key]suspicion
	// canaryPassed: the changes whose canary passed, by namespace (passedKey),
	// and when; canaryClaims: canaries this process granted, until the cache
	// shows them; canaryOpen: the running canaries the cache shows (open
	// records, as holders last read them) and their sources.
	canaryPassed map[string]time.Time
	// passedAsked: the changes whose earlier pass was looked up in the
	// cache (passedBefore), and when.
	passedAsked  map[string]time.Time
	canaryClaims map[Key]canaryClaim
	canaryOpen   map[Key][]stamp.ObjectRef
	// refPassed: when a canary of a source started and passed, by source
	// and namespace (whatever it held: ringProven).
	refPassed map[stamp.ObjectRef]map[string]ringPass
	// pruned: when stale entries were last dropped (at most every pruneEvery).
	pruned  time.Time
	limiter *rate.Limiter
	now     func() time.Time
}

// pruneEvery bounds how often the scheduler walks its pending entries to drop stale ones: a wave of N workloads steps the scheduler about
// N times, and a walk at each step cost O(N²). Between walks a stale entry is
// dropped when it is looked up (entry), and never counted (tally) nor ordered.
const pruneEvery = time.Second

// NewScheduler returns a Scheduler for policy reading the cache, whose records
// it verifies with keys.
func NewScheduler(policy Policy, cache client.Reader, keys Keys, kinds *workload.Registry) *Scheduler {
	limit := rate.Inf
	if policy.PerSecond > 0 {
		limit = rate.Limit(policy.PerSecond)
	}
	s := &Scheduler{
		Policy: policy, Cache: cache, Keys: keys, Kinds: kinds,
		pending:  map[Key]*pending{},
		inflight: map[Key]time.Time{},
		granted:  map[Key]grant{},
		halted:   map[Key]haltedOn{},
		seals:    map[Key]sealCheck{},
		progress: map[Key]progressMark{},
		suspects: map[Key]suspicion{},

		canaryPassed: map[string]time.Time{},
		passedAsked:  map[string]time.Time{},
		canaryClaims: map[Key]canaryClaim{},
		canaryOpen:   map[Key][]stamp.ObjectRef{},
		refPassed:    map[stamp.ObjectRef]map[string]ringPass{},
		limiter:      rate.NewLimiter(limit, 1),
		now:          time.Now,
	}
	current.Store(s)
	return s
}

// Announce says that k's sources changed and its reconcile is queued, with
// its priority, so that the wave order knows it before it asks. The one
// workload controller's source mapper, which sees every kind at once,
// announces every workload a change concerns before it queues any.
func (s *Scheduler) Announce(k Key, priority int, refs ...stamp.ObjectRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if p := s.entry(k, now); p != nil {
		p.refs = appendNew(p.refs, refs...)
		if p.announced { // a newer change, its reconcile still to ask: the debounce runs from this one
			p.seen, p.readyAt = now, now
		}
		return
	}
	s.pending[k] = &pending{priority: priority, announced: true, readyAt: now, seen: now, refs: refs}
	s.report()
}

// appendNew appends the refs not in to yet.
func appendNew(to []stamp.ObjectRef, refs ...stamp.ObjectRef) []stamp.ObjectRef {
	for _, r := range refs {
		if !slices.Contains(to, r) {
			to = append(to, r)
		}
	}
	return to
}

// wants notes which changes k waits to roll out (Ongoing reads them), and
// whether it can make no pod of them now (idle: no canary, see canaryAhead).
func (s *Scheduler) wants(k Key, causes []Change, st workload.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[k]; p != nil {
		p.refs = appendNew(p.refs[:0:0], refsOf(causes)...)
		p.idle, p.cost = st.Idle(), st.CanaryPods
	}
}

func refsOf(causes []Change) []stamp.ObjectRef {
	out := make([]stamp.ObjectRef, 0, len(causes))
	for _, c := range causes {
		out = appendNew(out, c.Ref)
	}
	return out
}

// Ongoing reports whether a change of one of the sources of causes still
// rolls to a workload of k's namespace other than k (rollingWhere). While it
// does, a workload the change completed is watched for crashes
// (RuleCrashing). When it cannot tell (the cache fails), it says yes:
// watching costs a pod read, not a rollout.
func (s *Scheduler) Ongoing(ctx context.Context, k Key, causes []Change) bool {
	refs := refsOf(causes)
	if len(refs) == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rolling, err := s.rollingWhere(ctx, refs, s.now(), func(j Key) bool { return j != k && j.Namespace == k.Namespace })
	return rolling || err != nil
}

// rollingWhere reports whether a change of one of refs rolls to a workload
// where says: one announced, debouncing or waiting for a slot to roll it
// out, granted one, or holding a slot with a rollout of it (one halted is
// not rolling); s.mu held.
func (s *Scheduler) rollingWhere(ctx context.Context, refs []stamp.ObjectRef, now time.Time, where func(Key) bool) (bool, error) {
	for j, p := range s.pending {
		if where(j) && !p.stale(now) && p.concerns(refs) {
			return true, nil
		}
	}
	for j, g := range s.granted { // granted a stamp just now: holders may have been read before
		if where(j) && now.Sub(g.at) <= inflightFor && g.entry.concerns(refs) {
			return true, nil
		}
	}
	held, err := s.recentHolders(ctx, now)
	if err != nil {
		return false, err
	}
	for j := range held {
		if !where(j) {
			continue
		}
		c, ok := s.seals[j]
		if !ok { // stamped by this process, not in the cache yet
			return true, nil
		}
		for _, ch := range ParseChanges(c.record.Cause) {
			if slices.Contains(refs, ch.Ref) {
				return true, nil
			}
		}
	}
	return false, nil
}

// Debounce records that k needs hash and returns how long to wait before
// rolling: until window has passed since the last different hash (the
// first: since the change was announced, when it was), at most MaxWait
// after the first; and, when together is not 0 (a rotation seen in part,
// Rotation.together), until together has passed since the first.
func (s *Scheduler) Debounce(k Key, hash string, window time.Duration, priority int, together time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	p := s.entry(k, now)
	switch {
	case p == nil:
		p = &pending{hash: hash, first: now, last: now}
		s.pending[k] = p
	case p.announced:
		// The change was seen when it was announced: its debounce runs from
		// then, the same for every workload it concerns, so that one whose
		// reconcile comes late keeps its place in the wave order.
		p = &pending{hash: hash, first: p.seen, last: p.seen}
		s.pending[k] = p
	case p.hash != hash:
		debouncedChanges.Inc()
		p.hash, p.last = hash, now
	}
	until := p.last.Add(window)
	if s.Policy.MaxWait > 0 {
		until = minTime(until, p.first.Add(s.Policy.MaxWait))
	}
	if together > 0 {
		until = maxTime(until, p.first.Add(together))
	}
	p.priority, p.readyAt, p.seen = priority, maxTime(until, now), now
	s.report()
	return max(0, until.Sub(now))
}

// Acquire asks for a rollout for k, after its debounce. needsSlot is false
// for a workload whose rollout has nothing to wait for (OnDelete): the budget
// does not apply to it, the rate does. It returns 0 when k may roll now (the
// caller must then stamp it and call Started or Release), or how long to wait
// before asking again.
func (s *Scheduler) Acquire(ctx context.Context, k Key, priority int, needsSlot bool) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.report()
	now := s.now()
	p := s.entry(k, now)
	if p == nil {
		p = &pending{first: now, last: now}
		s.pending[k] = p
	}
	p.priority, p.announced, p.readyAt, p.seen = priority, false, now, now

	if needsSlot && s.Policy.MaxConcurrent > 0 {
		held, err := s.holders(ctx, now)
		if err != nil {
			return 0, err
		}
		free := s.Policy.MaxConcurrent - len(held)
		if rank := s.rank(k, held, now); rank >= free {
			// The budget is used up, or others come first in this wave: ask again
			// roughly when a slot may be ours, so a long wave does not spin.
			return min(time.Duration(rank/s.Policy.MaxConcurrent+1)*500*time.Millisecond, 5*time.Second), nil
		}
	}
	if r := s.limiter.ReserveN(now, 1); r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return max(r.DelayFrom(now), 50*time.Millisecond), nil
	}
	delete(s.pending, k)
	s.granted[k] = grant{entry: p, at: now}
	if needsSlot {
		s.inflight[k] = now
	}
	return 0, nil
}

// grant is a wave entry Acquire granted, and when; claimed once its
// canary claim was settled (ClaimCanary, claim).
type grant struct {
	entry   *pending
	at      time.Time
	claimed bool
}

// inWave yields the entries that take a place in the wave order now: the
// candidates of pending, and the entries granted a slot whose canary claim
// is not settled yet. Between Acquire and ClaimCanary (the halt and suspect
// checks in between read the cache) a granted workload is in neither
// pending nor the canary claims; left out, the next of the wave would take
// the change's canary, and the first, told to wait for it, would never be
// stamped. s.mu held.
func (s *Scheduler) inWave(now time.Time) iter.Seq2[Key, *pending] {
	return func(yield func(Key, *pending) bool) {
		for k, p := range s.pending {
			if p.candidate(now) && !yield(k, p) {
				return
			}
		}
		for k, g := range s.granted {
			if !g.claimed && now.Sub(g.at) <= inflightFor && s.pending[k] == nil && !yield(k, g.entry) {
				return
			}
		}
	}
}

// placeOf is k's place in the wave at priority: the cost its entry knows
// (pending or granted), 0 when none; s.mu held.
func (s *Scheduler) placeOf(k Key, priority int) *pending {
	me := &pending{priority: priority}
	if p := s.pending[k]; p != nil {
		me.cost = p.cost
	} else if g, ok := s.granted[k]; ok {
		me.cost = g.entry.cost
	}
	return me
}

// claimed settles k's canary claim: its grant no longer holds a place in
// the wave order (inWave); s.mu held.
func (s *Scheduler) claimed(k Key) {
	if g, ok := s.granted[k]; ok {
		g.claimed = true
		s.granted[k] = g
	}
}

// Release gives back the slot k took in Acquire, whose stamp did not
// happen (a stale write, a wait found once the slot was k's), and puts k
// back in the wave where it stood, asking now: its debounce is over, and it
// keeps its place ahead of the workloads that come after it. Forgotten, it
// would ask again as a newcomer, with a new debounce window, while the next
// of the wave took the change's canary.
func (s *Scheduler) Release(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	g, ok := s.granted[k]
	s.release(k)
	if !ok || now.Sub(g.at) > inflightFor || s.entry(k, now) != nil {
		return
	}
	g.entry.announced, g.entry.readyAt, g.entry.seen = false, now, now
	s.pending[k] = g.entry
	s.report()
}

// Done frees the slot k took in Acquire and its canary claim: its rollout
// is over, k is gone, or its change is halted.
func (s *Scheduler) Done(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(k)
}

// release is Done; s.mu held.
func (s *Scheduler) release(k Key) {
	delete(s.inflight, k)
	delete(s.canaryClaims, k)
	delete(s.granted, k)
}

// inflightFor is how long a stamp this process wrote holds its slot without
// the cache showing its record (a write the cache never shows is let go).
const inflightFor = 30 * time.Second

// stamping reports whether this process stamped k and the cache it judges by
// does not show that yet.
func (s *Scheduler) stamping(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.inflight[k]
	return ok && s.now().Sub(at) <= inflightFor
}

// Forget drops k's pending state: it no longer needs a rollout.
func (s *Scheduler) Forget(k Key) {
	s.forgetRead(k, time.Time{})
}

// forgetRead drops k's pending state, as its sources read at readAt showed
// nothing to roll out, unless a change of them was announced since (zero
// readAt: whatever was announced). Such a change's reconcile is queued and
// will say; until then k keeps its place in the change's wave. Dropped, it
// would let the next workload of the wave ask first and take the change's
// canary.
func (s *Scheduler) forgetRead(k Key, readAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[k]; p == nil || !p.announced || readAt.IsZero() || !p.seen.After(readAt) {
		delete(s.pending, k)
	}
	s.report()
}

// Next returns up to n workloads waiting for a slot, first in wave order: the
// ones to wake when a slot frees. With no budget, or nobody asking, nobody
// waits for a slot, and it reads nothing.
func (s *Scheduler) Next(ctx context.Context, n int) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.Policy.MaxConcurrent == 0 || !s.anyAsking(now) {
		return nil
	}
	held, err := s.holders(ctx, now)
	if err != nil {
		return nil
	}
	var out []Key
	for _, k := range s.order(held, now) {
		if s.pending[k].asking(now) && len(out) < n {
			out = append(out, k)
		}
	}
	return out
}

// anyAsking reports whether a workload asks for a slot now; s.mu held.
func (s *Scheduler) anyAsking(now time.Time) bool {
	for _, p := range s.pending {
		if p.asking(now) {
			return true
		}
	}
	return false
}

// entry returns k's pending entry, or nil; a stale one is dropped; s.mu held.
func (s *Scheduler) entry(k Key, now time.Time) *pending {
	p := s.pending[k]
	if p != nil && p.stale(now) {
		s.drop(k, p)
		return nil
	}
	return p
}

// drop deletes k's stale pending entry p; s.mu held.
func (s *Scheduler) drop(k Key, p *pending) {
	delete(s.pending, k)
	if p.announced {
		s.Log.Info("a workload announced for a change did not ask for it in time: it loses its place in the wave",
			"workload", k.String(), "after", forgetAfter.String())
	}
}

// SlotsInUse counts the workloads holding a slot now.
func (s *Scheduler) SlotsInUse(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held, err := s.holders(ctx, s.now())
	return len(held), err
}

// holders returns the workloads holding a slot: open records sealed by
// configstamp in the cache, in scope, until they are closed (a rollout past
// its deadline keeps its slot until its failure and halt are written, see
// closeGrace), and this process's stamps the cache does not show yet.
func (s *Scheduler) holders(ctx context.Context, now time.Time) (map[Key]bool, error) {
	out := map[Key]bool{}
	canaries := map[Key][]stamp.ObjectRef{}
	seals := make(map[Key]sealCheck, len(s.seals))
	inScope := map[string]bool{} // asked once per namespace
	for _, kind := range s.Kinds.All() {
		list := kind.NewList()
		if err := s.Cache.List(ctx, list, client.MatchingFields{IndexRolling: "true"}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("while listing rolling %s: %w", kind.Resource, err)
		}
		for _, o := range kind.Items(list) {
			k := Key{kind.Name, o.GetNamespace(), o.GetName()}
			c := s.unseal(k, o)
			seals[k] = c
			r := c.record
			if c.err != nil || !s.holdsSlot(r, o, now) {
				continue
			}
			in, asked := inScope[k.Namespace]
			if !asked {
				in = s.InScope == nil || s.InScope(ctx, k.Namespace)
				inScope[k.Namespace] = in
			}
			if in { // else another installation's
				out[k] = true
				if r.Canary == CanaryRunning {
					canaries[k] = refsOf(ParseChanges(r.Cause))
				}
			}
		}
	}
	s.seals, s.canaryOpen = seals, canaries
	for k, c := range s.canaryClaims {
		if r := canaries[k]; r != nil || now.Sub(c.at) > inflightFor {
			delete(s.canaryClaims, k) // the cache shows it now (or never will)
		}
	}
	for k, at := range s.inflight {
		if out[k] || now.Sub(at) > inflightFor {
			delete(s.inflight, k) // the cache shows it now (or never will)
		} else {
			out[k] = true
		}
	}
	s.held, s.heldAt = out, now
	return out, nil
}

// holdsSlot reports whether an open record (its seal checked) of obj holds
// a slot at now: from its start (no later than clockSkew from now) until it
// is closed, at the latest slotGrace after the end of its verification
// window (at most MaxVerifyWindow away), and never past its bound
// (SlotBound), whatever superseded its change in between.
func (s *Scheduler) holdsSlot(r Record, obj client.Object, now time.Time) bool {
	switch {
	case !r.Open() || r.Started.After(now.Add(clockSkew)) || now.After(s.SlotBound(r, obj)):
		return false
	case r.State == Verifying:
		return !r.Until.After(now.Add(MaxVerifyWindow+clockSkew)) && !now.After(r.Until.Add(slotGrace))
	}
	return true
}

// SlotBound is the latest an open record r of obj holds a slot: the
// progress deadline and obj's verification window from the stamp that first
// took the slot (a superseding change keeps its start), and slotGrace to
// write the rollout's end. A rollout still open then goes on without a slot:
// no tenant can hold one longer, whatever it changes meanwhile.
func (s *Scheduler) SlotBound(r Record, obj client.Object) time.Time {
	window := s.Policy.VerifyWindow
	if obj != nil {
		window, _ = VerifyWindow(obj.GetAnnotations(), s.Policy.VerifyWindow)
	}
	return r.Started.Add(s.Policy.ProgressDeadline + window + slotGrace)
}

// heldFor is how long Ongoing reuses the last holders it read: a
// completed workload asks on each of its reconciles, and a wave without a
// budget has many open rollouts to read.
const heldFor = time.Second

// recentHolders is holders, or what it found less than heldFor ago; s.mu held.
func (s *Scheduler) recentHolders(ctx context.Context, now time.Time) (map[Key]bool, error) {
	if s.held != nil && now.Sub(s.heldAt) < heldFor {
		return s.held, nil
	}
	return s.holders(ctx, now)
}

// PollScale is how many times longer than PodPoll an open rollout waits
// between reads of its pods: one more for each ten rollouts open, so a wave
// without a budget lists pods at most about five times a second however
// many roll at once.
func (s *Scheduler) PollScale() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 1 + len(s.held)/10
}

// suspicion is a suspect's change (its sources) and until when it holds.
type suspicion struct {
	refs  []stamp.ObjectRef
	until time.Time
}

// suspectFor bounds how long a suspect holds its change from its first
// look (it is judged again every PodPollMin meanwhile, and a Ready pod ends
// the suspicion at once): as long as a busy node may write the crash after
// the unready it wrote first (workload.LateReadyMargin; 23 s seen on the
// test node). With 15 s, the next workload of the wave was stamped while
// the crash was still unwritten (test/realnode
// TestCrashAfterCompletionHaltsTheRestOfTheWave). A pod unready for good
// delays the wave by that margin once, never stops it.
const suspectFor = workload.LateReadyMargin

// suspect notes (or, with on false, forgets) that k, whose record is rec,
// is a suspect: its change waits (suspected).
func (s *Scheduler) suspect(k Key, rec Record, on bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		delete(s.suspects, k)
		return
	}
	if _, ok := s.suspects[k]; !ok { // the first look starts the bound
		s.suspects[k] = suspicion{refs: refsOf(ParseChanges(rec.Cause)), until: now.Add(suspectFor)}
	}
}

// suspected returns how long k, about to roll out causes, waits for a
// suspect of its namespace whose change is of the same source (0: none).
// A workload whose own pods went unready mid-wave may be crashing on the
// change: no other workload takes it until that is judged.
func (s *Scheduler) suspected(k Key, causes []Change, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := refsOf(causes)
	for j, sus := range s.suspects {
		switch {
		case !now.Before(sus.until):
			// Past its bound: it holds no more, and its next look does not
			// start another (suspect); Ready again, or a new record, does.
			continue
		case j != k && j.Namespace == k.Namespace && slices.ContainsFunc(sus.refs, func(r stamp.ObjectRef) bool { return slices.Contains(refs, r) }):
			return min(sus.until.Sub(now), time.Second)
		}
	}
	return 0
}

// progressMark is an open rollout's status as last seen, and since when.
type progressMark struct {
	mark string
	at   time.Time
}

// progressed returns when k's open rollout, its status now mark, last
// progressed: when this process saw mark change, or what its pods show
// (Verification.Progressed) when that is later. On the first look (a
// restart, a new leader) the pods alone say it, so the deadline goes on
// where it was; with no pods read, from now (a late failure is better than
// a false one). Its slot stays bounded by its stamp (SlotBound).
func (s *Scheduler) progressed(k Key, mark string, now time.Time, v Verification) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, seen := s.progress[k]
	switch {
	case seen && p.mark == mark:
		return later(p.at, v.Progressed)
	case seen || !v.Read || v.Unread:
		p = progressMark{mark: mark, at: now}
	default:
		p = progressMark{mark: mark, at: v.Progressed}
		if p.at.After(now) {
			p.at = now
		}
	}
	s.progress[k] = p
	return p.at
}

// forgetProgress drops k's progress: it has no rollout open.
func (s *Scheduler) forgetProgress(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.progress, k)
}

// sealCheck is the outcome of one seal check of an open record (Unseal), for
// the object version and the key it was made with.
type sealCheck struct {
	uid     types.UID
	version string
	key     *stamp.Hasher
	record  Record
	err     error
}

// unseal checks the seal of o's record, or reuses the last check of k when
// it was of the same object version with the same key; s.mu held. A record
// sealed with a key configstamp no longer has (or has only now) is checked
// again: ByID gives another Hasher.
func (s *Scheduler) unseal(k Key, o client.Object) sealCheck {
	id, _, _ := strings.Cut(o.GetAnnotations()[AnnotationSeal], ".")
	key := s.Keys.ByID(id)
	if c, ok := s.seals[k]; ok && c.uid == o.GetUID() && c.version == o.GetResourceVersion() && c.key == key {
		return c
	}
	r, err := Unseal(o, s.Keys)
	return sealCheck{uid: o.GetUID(), version: o.GetResourceVersion(), key: key, record: r, err: err}
}

// rank is k's place in the wave order (order) among the candidates, or -1
// when k is not one. It counts the candidates that come first instead of
// sorting them all: a budgeted wave asks it at every step.
func (s *Scheduler) rank(k Key, held map[Key]bool, now time.Time) int {
	me := s.pending[k]
	if me == nil || !me.candidate(now) {
		return -1
	}
	count := map[string]int{} // candidates per namespace
	inLine := 0               // candidates of k's namespace ahead of k
	for j, p := range s.pending {
		// An idle workload (paused, nothing to roll) waits for its change's
		// canary, which it can never be: counted ahead of that canary, it
		// would keep it from a slot (a budget of one: neither moves).
		if !p.candidate(now) || (p.idle && j != k) {
			continue
		}
		count[j.Namespace]++
		if j.Namespace == k.Namespace && inNamespace(entryOf{j, p}, entryOf{k, me}) < 0 {
			inLine++
		}
	}
	holdsIn := holdsPerNamespace(held)
	position := holdsIn[k.Namespace] + inLine
	rank := inLine
	for ns, n := range count {
		if ns == k.Namespace {
			continue
		}
		// ns's candidates stand at holdsIn[ns], holdsIn[ns]+1, ...; those at
		// k's position come first when ns sorts first.
		ahead := position - holdsIn[ns]
		if ns < k.Namespace {
			ahead++
		}
		rank += min(max(ahead, 0), n)
	}
	return rank
}

// entryOf is a pending entry with its workload.
type entryOf struct {
	k Key
	p *pending
}

// inNamespace orders two workloads of one namespace (WaveOrder).
func inNamespace(a, b entryOf) int {
	return WaveOrder(a.k, a.p.place(), b.k, b.p.place())
}

func (p *pending) place() Place { return Place{Priority: p.priority, Cost: p.cost} }

// Place is what orders a workload in its namespace's wave: its Priority
// (AnnotationPriority), then the Cost of a canary of it: the pods it runs
// a change on (workload.Status.CanaryPods; 0 counts as one).
type Place struct {
	Priority int
	Cost     int64
}

// WaveOrder orders two workloads of one namespace, a at ap and b at bp, as
// its wave rolls them: higher priority first, then the cheaper canary (a
// Recreate Deployment, whose canary replaces every pod, after one held at
// one new pod), then name, then kind. The first of a change is its canary.
func WaveOrder(a Key, ap Place, b Key, bp Place) int {
	return cmp.Or(cmp.Compare(bp.Priority, ap.Priority), cmp.Compare(max(ap.Cost, 1), max(bp.Cost, 1)),
		cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
}

func holdsPerNamespace(held map[Key]bool) map[string]int {
	holdsIn := map[string]int{}
	for k := range held {
		holdsIn[k.Namespace]++
	}
	return holdsIn
}

// order is the wave order of the candidates: workloads asking now, announced,
// or leaving their debounce window within `upcoming`; s.mu held.
func (s *Scheduler) order(held map[Key]bool, now time.Time) []Key {
	byNS := map[string][]entryOf{}
	for k, p := range s.pending {
		if p.candidate(now) {
			byNS[k.Namespace] = append(byNS[k.Namespace], entryOf{k, p})
		}
	}
	holdsIn := holdsPerNamespace(held)
	type placed struct {
		k        Key
		position int
	}
	var all []placed
	for ns, keys := range byNS {
		slices.SortFunc(keys, inNamespace)
		for i, e := range keys {
			all = append(all, placed{e.k, holdsIn[ns] + i})
		}
	}
	slices.SortFunc(all, func(a, b placed) int {
		return cmp.Or(cmp.Compare(a.position, b.position), cmp.Compare(a.k.Namespace, b.k.Namespace))
	})
	out := make([]Key, len(all))
	for i, p := range all {
		out[i] = p.k
	}
	return out
}

// haltedOn is the halted change a workload waits on, and its priority.
type haltedOn struct {
	change   string
	priority int
}

// NoteHalted records that k, of priority, waits on the halted change and
// reports whether it is news (to be told once, with an event).
func (s *Scheduler) NoteHalted(k Key, change string, priority int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, k)
	if s.halted[k].change == change {
		return false
	}
	s.halted[k] = haltedOn{change: change, priority: priority}
	s.report()
	rolloutsHalted.Inc()
	return true
}

// ClearHalted forgets that k waited on a halted change.
func (s *Scheduler) ClearHalted(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.halted, k)
	s.report()
}

// Lifted returns the workloads waiting on any of changes, whose halt was
// lifted: the ones to wake. It announces them with their priorities first, so
// the wave resumes in its order rather than in the order they ask.
func (s *Scheduler) Lifted(changes []string) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Key
	now := s.now()
	for k, h := range s.halted {
		if slices.Contains(changes, h.change) {
			out = append(out, k)
			if s.entry(k, now) == nil {
				s.pending[k] = &pending{priority: h.priority, announced: true, readyAt: now, seen: now}
			}
		}
	}
	s.report()
	return out
}

// stale: its reconcile stopped asking (the workload was deleted, or no longer
// needs a rollout and was busy when it was announced). A workload in its
// debounce window asks again at the window's end.
func (p *pending) stale(now time.Time) bool {
	return now.Sub(maxTime(p.seen, p.readyAt)) > forgetAfter
}

// candidate: it takes a place in the wave order (asking now, announced, or
// leaving its debounce window within `upcoming`).
func (p *pending) candidate(now time.Time) bool {
	return !p.stale(now) && !p.readyAt.After(now.Add(upcoming))
}

// asking: it asks for a slot now (its debounce window is over).
func (p *pending) asking(now time.Time) bool {
	return !p.announced && !p.readyAt.After(now) && !p.stale(now)
}

// report drops stale entries (at most every pruneEvery) and updates the
// halted gauge; s.mu held. The pending gauges are read at each scrape
// (tally), which leaves stale entries out.
func (s *Scheduler) report() {
	now := s.now()
	if now.Sub(s.pruned) >= pruneEvery {
		s.pruned = now
		for k, p := range s.pending {
			if p.stale(now) {
				s.drop(k, p)
			}
		}
		maps.DeleteFunc(s.granted, func(_ Key, g grant) bool { return now.Sub(g.at) > inflightFor })
		for _, m := range []map[string]time.Time{s.canaryPassed, s.passedAsked} {
			maps.DeleteFunc(m, func(_ string, at time.Time) bool { return now.Sub(at) > passedFor })
		}
		for ref, m := range s.refPassed {
			if maps.DeleteFunc(m, func(_ string, p ringPass) bool { return now.Sub(p.passed) > passedFor }); len(m) == 0 {
				delete(s.refPassed, ref)
			}
		}
	}
	haltedWorkloads.Set(float64(len(s.halted)))
}

// tally counts the pending entries that are not stale; s.mu held.
func (s *Scheduler) tally() (waiting, debouncing, pending int) {
	now := s.now()
	for _, p := range s.pending {
		switch {
		case p.stale(now):
			continue
		case p.announced:
		case p.readyAt.After(now):
			debouncing++
		default:
			waiting++
		}
		pending++
	}
	return waiting, debouncing, pending
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
