package rollout

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// AnnotationCanaryOpt (user, on a workload or its Namespace): "false" turns
// the canary off for it (the workload's value wins); "true" on, which is
// the default (--canary).
const AnnotationCanaryOpt = "configstamp.io/canary"

// CanaryWanted reads AnnotationCanaryOpt from the workload, then its
// Namespace; def (--canary) when neither says. A value other than "true"
// or "false" is a Problem and is passed over.
func CanaryWanted(workloadAnnotations, namespaceAnnotations map[string]string, def bool) (bool, []stamp.Problem) {
	return choice(workloadAnnotations, namespaceAnnotations, AnnotationCanaryOpt, "true", "false", def)
}

// A change's canary: the first workload of a namespace to roll out a change
// of a source (a Change: what it references of the source, as it is now)
// is its canary, and no other workload of the namespace gets a change of
// that source until it passed, whatever the budget. Held at one new pod
// (workload.Hold), it passes when that pod stayed healthy for the window;
// a workload that cannot be held passes when its rollout completed. It
// fails like any rollout: the change is halted, and one pod (or one
// workload) ran it. Only the changes it rolled out pass: a workload that
// references other keys of the source has another Change, and its own canary.

// canaryClaim is a canary this process granted, until the cache shows its record.
type canaryClaim struct {
	refs []stamp.ObjectRef
	at   time.Time
}

// passedFor is how long a passed canary lets its change roll without
// another: longer than any wave waits (MaxWait, the budget's steps).
const passedFor = time.Hour

// canaryWait is how soon a workload waiting on a canary asks again, when
// nothing wakes it (the canary's pass wakes the next in the wave).
const canaryWait = 2 * time.Second

// passedKey names a change of a namespace among the passed canaries.
func passedKey(namespace string, c Change) string { return namespace + "/" + c.String() }

// unpassed are the causes of k that no canary passed in its namespace:
// as this process saw them pass (passCanary), or, for a pass it never saw
// (one before a restart or a leader change), as the records in the cache
// say (passedBefore); nor in a ring below (ringProven); s.mu held.
func (s *Scheduler) unpassed(ctx context.Context, k Key, causes []Change, now time.Time) ([]Change, error) {
	var err error
	out := unpassedOf(k.Namespace, causes, func(key string) bool {
		at, ok := s.canaryPassed[key]
		if !ok && err == nil {
			at, ok, err = s.passedBefore(ctx, key, now)
		}
		return ok && now.Sub(at) <= passedFor
	})
	left := out[:0]
	for _, c := range out {
		if ok, perr := s.ringProven(ctx, k, c.Ref, now); perr != nil || !ok {
			left, err = append(left, c), cmp.Or(err, perr)
		}
	}
	return left, err
}

// Unpassed reports whether a change of causes of k has passed no canary
// (unpassed).
func (s *Scheduler) Unpassed(ctx context.Context, k Key, causes []Change) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unpassed, err := s.unpassed(ctx, k, causes, s.now())
	return len(unpassed) > 0, err
}

// dormantWait: how often a dormant workload (workload.Status.Dormant) looks
// again whether its change's canary passed elsewhere. It makes no pod
// meanwhile; a resume or a scale-up wakes it at once (a new generation).
const dormantWait = 30 * time.Second

// IndexPassed indexes workloads whose record (carrying a seal) is its
// change's canary and passed — held and passed, or whole and completed —
// by each change of its cause in its namespace (passedKey, the key the
// scheduler keeps passes by). The seal is verified where the index is read
// (passedBefore).
const IndexPassed = "configstamp.io/canary-passed"

// IndexPassedFunc is the IndexPassed indexer.
func IndexPassedFunc(obj client.Object) []string {
	a := obj.GetAnnotations()
	if _, sealed := a[AnnotationSeal]; !sealed {
		return nil
	}
	r := Read(a)
	if !r.passed() {
		return nil
	}
	var out []string
	for _, c := range ParseChanges(r.Cause) {
		out = append(out, passedKey(obj.GetNamespace(), c))
	}
	return out
}

// passed: the record is its change's canary, and it passed.
func (r Record) passed() bool {
	return r.Canary == CanaryPassed || r.Canary == CanaryRunning && r.State == Completed
}

// passedBefore: whether and when (its stamp) a canary of the change of a
// namespace that key names (passedKey) passed before this process could see
// it pass: a sealed record of the cache says so (IndexPassed). Asked once per change and process (the
// cache is synced before the first reconcile; later passes are this
// process's own), the answer kept with canaryPassed's; s.mu held.
func (s *Scheduler) passedBefore(ctx context.Context, key string, now time.Time) (time.Time, bool, error) {
	if _, asked := s.passedAsked[key]; asked {
		return time.Time{}, false, nil
	}
	var at time.Time
	for _, kind := range s.Kinds.All() {
		list := kind.NewList()
		if err := s.Cache.List(ctx, list, client.MatchingFields{IndexPassed: key}, client.UnsafeDisableDeepCopy); err != nil {
			return time.Time{}, false, fmt.Errorf("while looking up passed canaries: %w", err)
		}
		for _, o := range kind.Items(list) {
			if r, err := Unseal(o, s.Keys); err == nil && r.passed() && r.Started.After(at) {
				at = r.Started
			}
		}
	}
	s.passedAsked[key] = now
	if at.IsZero() {
		return at, false, nil
	}
	s.canaryPassed[key] = at
	return at, true, nil
}

// unpassedOf are the causes of a workload of namespace whose passedKey
// passed does not report: the changes it would be the canary of.
func unpassedOf(namespace string, causes []Change, passed func(key string) bool) []Change {
	var out []Change
	for _, c := range causes {
		if !passed(passedKey(namespace, c)) {
			out = append(out, c)
		}
	}
	return out
}

// Waiting is a workload of a wave about to roll out its causes, with
// canaries on for it (CanaryWanted), as Canaries weighs it.
type Waiting struct {
	Key    Key
	Place  Place
	Causes []Change
	// Idle: it can make no pod now (workload.Status.Idle): never a canary.
	Idle bool
}

// Canaries are the canaries a wave of waiting workloads gets, as the
// scheduler grants them one after the other (canaryAhead, ClaimCanary,
// passCanary), with the changes each is the canary of: in wave order, each
// workload that rolls out a change of its namespace no earlier one rolled
// out is that change's canary, and once it passed, every change it rolled
// out passed. A change is key-precise: a workload that references other
// keys of a source has a change, and a canary, of its own. Nothing has
// passed yet; workloads with canaries off are left out (they neither wait
// for a canary nor are one).
func Canaries(ws []Waiting) map[Key][]Change {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b Waiting) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), WaveOrder(a.Key, a.Place, b.Key, b.Place))
	})
	passed := map[string]bool{}
	out := map[Key][]Change{}
	for _, w := range ws {
		if w.Idle {
			continue
		}
		first := unpassedOf(w.Key.Namespace, w.Causes, func(key string) bool { return passed[key] })
		if len(first) == 0 {
			continue
		}
		out[w.Key] = first
		for _, c := range w.Causes {
			passed[passedKey(w.Key.Namespace, c)] = true
		}
	}
	return out
}

// CanaryJudgedUntil is when a canary held at one new pod, whose pods show
// v, passes if nothing changes (ok false: no pod of it is Ready, or one
// shows a sign of failure): once its first pod stayed healthy (Ready, no
// restart) for window, the verification window as set.
func CanaryJudgedUntil(v Verification, window time.Duration) (time.Time, bool) {
	if !v.Read || v.Unread || v.Problem != "" || v.FirstHealthySince.IsZero() {
		return time.Time{}, false
	}
	return v.FirstHealthySince.Add(window), true
}

// canaryAhead returns how long k, about to roll out causes, waits for a
// canary: another workload's canary of one of their sources is running
// (granted by this process, or open in the cache), or another workload
// that comes first in the wave waits to roll one of them out and will be
// the canary. 0: no canary to wait for (k may be the canary itself).
// A workload that can make no pod now (idle: workload.Status.Idle) is never
// the canary: the others do not wait for it, and it waits for any other
// that will be, wherever that one is in the wave. s.mu held.
func (s *Scheduler) canaryAhead(ctx context.Context, k Key, priority int, causes []Change, idle bool, now time.Time) (time.Duration, error) {
	unpassed, err := s.unpassed(ctx, k, causes, now)
	refs := refsOf(unpassed)
	if len(refs) == 0 || err != nil {
		return 0, err
	}
	if _, err := s.recentHolders(ctx, now); err != nil {
		return 0, err
	}
	overlaps := func(r []stamp.ObjectRef) bool {
		for _, x := range r {
			for _, y := range refs {
				if x == y {
					return true
				}
			}
		}
		return false
	}
	for j, r := range s.canaryOpen {
		if j != k && j.Namespace == k.Namespace && overlaps(r) {
			return canaryWait, nil
		}
	}
	for j, c := range s.canaryClaims {
		if now.Sub(c.at) > inflightFor {
			delete(s.canaryClaims, j)
			continue
		}
		if j != k && j.Namespace == k.Namespace && overlaps(c.refs) {
			return canaryWait, nil
		}
	}
	if overlaps(s.canaryOpen[k]) {
		// k is the running canary of one of these sources: a newer change
		// supersedes its rollout as the canary, and the others wait for it.
		// Were it to wait for one that comes first in the wave, that one
		// would wait for k's open canary: neither would move until k's slot
		// ended (a fix applied while a lower-priority canary ran).
		return 0, nil
	}
	me := entryOf{k, s.placeOf(k, priority)}
	for j, p := range s.inWave(now) {
		if j != k && j.Namespace == k.Namespace && !p.idle && p.concerns(refs) && (idle || inNamespace(entryOf{j, p}, me) < 0) {
			return canaryWait, nil
		}
	}
	return 0, nil
}

// CanaryAhead is canaryAhead for the gate, before it asks for a slot.
func (s *Scheduler) CanaryAhead(ctx context.Context, k Key, priority int, causes []Change, idle bool) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canaryAhead(ctx, k, priority, causes, idle, s.now())
}

// ClaimCanary, once k holds its slot: whether k is the canary of its
// change (no canary passed for one of causes), or how long it waits for
// another's (canaryAhead, looked at again now the slot is k's). A granted
// canary counts at once for the rest of the wave; Release drops it when
// the stamp did not happen. An idle workload (workload.Status.Idle) is no
// canary: with no other to wait for, it is stamped (it makes no pod) and
// its change stays unpassed, so the next workload that can make a pod is
// the canary.
func (s *Scheduler) ClaimCanary(ctx context.Context, k Key, priority int, causes []Change, idle bool) (bool, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	wait, err := s.canaryAhead(ctx, k, priority, causes, idle, now)
	if err != nil || wait > 0 {
		return false, wait, err
	}
	unpassed, err := s.unpassed(ctx, k, causes, now)
	if err != nil {
		return false, 0, err
	}
	s.claimed(k)
	if len(unpassed) == 0 || idle {
		return false, 0, nil
	}
	s.canaryClaims[k] = canaryClaim{refs: refsOf(unpassed), at: now}
	return true, 0, nil
}

// CanaryWritten tells the scheduler that the reconciler wrote next, the
// record that follows judged on k: a canary that passed (its hold put
// back), or one whose whole workload completed, lets the rest of its wave
// roll, from now. Only once written: a write refused (a conflict with the
// workload's own controller) leaves the canary running, judged again.
func (s *Scheduler) CanaryWritten(k Key, judged, next Record) {
	if judged.Canary == CanaryRunning && (next.Canary == CanaryPassed || next.State == Completed) {
		s.passCanary(k, ParseChanges(judged.Cause), judged.Started)
	}
}

// passCanary notes that the canary k of causes, started at started,
// passed: the rest of the wave rolls them out with the budget.
func (s *Scheduler) passCanary(k Key, causes []Change, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, c := range causes {
		s.canaryPassed[passedKey(k.Namespace, c)] = now
		if s.refPassed[c.Ref] == nil {
			s.refPassed[c.Ref] = map[string]ringPass{}
		}
		s.refPassed[c.Ref][k.Namespace] = ringPass{started: started, passed: now}
	}
	delete(s.canaryClaims, k)
	delete(s.canaryOpen, k)
}

// canaryPassAt: when the canary of rec, held at one new pod, passes (ok
// false: not while the pods show what they show): once a pod of the new
// revision stayed healthy (Ready, no restart) for the window, with no sign
// of failure among them. A second new pod the workload's controller made
// meanwhile (it goes on by itself once the first was available for the
// window, its minReadySeconds) delays nothing.
func canaryPassAt(o Observation) (time.Time, bool) {
	return CanaryJudgedUntil(o.Verification, o.VerifyWindow)
}
