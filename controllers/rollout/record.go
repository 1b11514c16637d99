// Package rollout is configstamp's rollout safety: the record of the rollout
// configstamp started on a workload (a small state machine kept in the
// workload's own annotations), when that rollout is complete or has failed for
// each kind and update strategy, and the Scheduler that spreads the rollouts of
// a shared change (debounce, budget of concurrent rollouts, rate, wave order,
// halts). It holds no client writes: the reconciler applies what it decides.
package rollout

import (
	"crypto/hmac"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Rollout-safety annotations on a workload's metadata. The state a new leader
// needs lives on the workloads themselves, so nothing is lost across restarts.
const (
	// AnnotationState is the state of the last rollout configstamp started:
	// "rolling", "verifying", "completed", "failed" or "idle" (see State).
	AnnotationState = "configstamp.io/rollout-state"
	// AnnotationStarted is the RFC 3339 time at which configstamp stamped the
	// template for that rollout.
	AnnotationStarted = "configstamp.io/rollout-started"
	// AnnotationCause names the changes that caused it, as FormatChanges.
	AnnotationCause = "configstamp.io/rollout-cause"
	// AnnotationHalted names the changes whose rollout failed on this workload;
	// no further rollout caused by exactly these changes starts while it is
	// there. Removing it lifts the halt.
	AnnotationHalted = "configstamp.io/halted"
	// AnnotationPriority (user): an integer; higher goes first in a wave, among
	// the workloads of one namespace.
	AnnotationPriority = "configstamp.io/rollout-priority"
	// AnnotationDebounce (user): a Go duration overriding --debounce.
	AnnotationDebounce = "configstamp.io/debounce"
	// AnnotationVerifyUntil is the RFC 3339 time until which a rollout that
	// completed as `kubectl rollout status` says must stay healthy to count
	// as completed (state "verifying").
	AnnotationVerifyUntil = "configstamp.io/rollout-verify-until"
	// AnnotationVerifyWindow (user): a Go duration overriding --verify-window
	// for this workload ("0s": completed as soon as it is complete).
	AnnotationVerifyWindow = "configstamp.io/verify-window"
	// AnnotationVerified names the last revision of the workload whose
	// rollout passed verification, the only one an undo returns to: its
	// stamp (configstamp.io/config-hash) and, for a workload that asks for
	// undo, a digest of its whole pod template after a dot (Verified).
	AnnotationVerified = "configstamp.io/rollout-verified"
	// AnnotationCanary says that the rollout is its change's canary: "running"
	// while the wave waits for its verdict, "passed" once it passed (see
	// Canary).
	AnnotationCanary = "configstamp.io/rollout-canary"
	// AnnotationHold names the fields of the workload's spec configstamp set
	// to hold a canary at one new pod, with the values to put back (see
	// workload.Hold): present while they are set.
	AnnotationHold = "configstamp.io/rollout-hold"
	// AnnotationUndo is the stamp of the revision configstamp's undo returned
	// a failed workload to (configstamp.io/on-failure: undo): present while
	// the undo's own rollout is followed (see Record.StartUndo).
	AnnotationUndo = "configstamp.io/rollout-undo"
)

// Canary is where a rollout stands as its change's canary.
type Canary string

const (
	// NoCanary: the rollout is no canary (its change passed one, or canaries
	// are off for it).
	NoCanary Canary = ""
	// CanaryRunning: the first workload of its change's wave; no other
	// workload gets the change until it passes. With a hold (Record.Hold) one
	// new pod runs it, judged for the window; without, the whole workload,
	// judged until its rollout completes.
	CanaryRunning Canary = "running"
	// CanaryPassed: it passed; its rollout goes on like any other.
	CanaryPassed Canary = "passed"
)

// State is where the rollout configstamp started on a workload stands: the
// states of the lifecycle table (Lifecycle, which lists every transition
// and its effects; these are the record's values).
//
//	(none) --StartRecord--> Rolling --StartVerifying--> Verifying --Complete--> Completed
//	                           |  \--Complete (no window)----------------------^
//	                           \--Fail-------------------\--Fail----------> Failed (--Resume: halt lifted)
//
// A new rollout (StartRecord) may follow Completed or Failed. Rolling and
// Verifying hold a slot of the budget, from the stamp until the record is
// closed: a rollout that `kubectl rollout status` calls complete is verified
// for a window (every pod of the new revision stays Ready, no container
// restarts) before it counts as completed, and a failure inside the window
// is a failure like the deadline's. A rollout
// failed at its deadline gives its slot back only with the halt written in the
// same patch, so no second workload is stamped with the failed change. A record that
// has ended is never judged again: nothing that happens to the workload
// afterwards (a scale, a new node, an image bump) can make it fail.
type State string

const (
	// None: configstamp never started a rollout here, or the record predates
	// rollout-state (an older configstamp, whose rollouts count as ended).
	None    State = ""
	Rolling State = "rolling"
	// Verifying: complete as `kubectl rollout status` says, and watched for
	// the verification window (Record.Until).
	Verifying State = "verifying"
	Completed State = "completed"
	Failed    State = "failed"
	// Idle: stamped while its workload could make no pod of the new
	// revision (paused by its user, no replicas, OnDelete, a partition that
	// holds every pod, an extra kind whose progress configstamp does not
	// follow): nothing was judged, and nothing is completed. It
	// holds no slot and halts nothing; once the workload makes pods (it is
	// resumed, scaled up), its rollout is judged from then (Unidle).
	Idle State = "idle"
)

// AnnotationSeal proves that configstamp wrote the record: "<key id>.<MAC>",
// a keyed MAC (stamp.Hasher.Seal) over the workload's UID and every field of
// the record. A record whose seal is missing, does not verify, or was made
// with a key configstamp no longer has counts for nothing (Unseal): it holds
// no slot and halts nothing. So a tenant who can edit its own workloads cannot
// forge a record, copy one from another workload, or alter one; removing the
// halted annotation (the documented resume) breaks the seal and so lifts the
// halt, as it always did.
const AnnotationSeal = "configstamp.io/rollout-seal"

// RecordAnnotations are the record's annotations: configstamp writes them,
// and only the reconciler reads them (webhook.MayRestamp).
var RecordAnnotations = []string{AnnotationState, AnnotationStarted, AnnotationCause, AnnotationSeal, AnnotationHalted, AnnotationVerifyUntil, AnnotationVerified,
	AnnotationCanary, AnnotationHold, AnnotationUndo}

// domainRecord separates the record's seal from every other keyed value.
const domainRecord = "configstamp.io/rollout-record"

// Record is the rollout record read from a workload's annotations.
type Record struct {
	State   State
	Started time.Time // zero when absent or unreadable
	// Until: a Verifying rollout counts as completed when it stayed healthy
	// until then (zero otherwise).
	Until  time.Time
	Cause  string
	Halted string
	// Verified: the identity of the last revision whose rollout passed
	// verification (VerifiedID; "" when none did yet); carried from rollout
	// to rollout.
	Verified string
	// Canary: whether this rollout is its change's canary, and how it stands.
	Canary Canary
	// Hold: the spec fields configstamp set to hold the canary at one pod
	// (workload.EncodeHold), to be put back by the next record written
	// without it; carried while they stay set (a failed canary keeps its
	// hold: no second pod gets the failed change).
	Hold string
	// Undo: the rollout is configstamp's undo of the failure this record
	// closed before, to the revision stamped so ("" for any other rollout).
	Undo string
	// KeyID is the installation key the record is sealed with; the content
	// ids of its changes (Cause, Halted) are made with the same key.
	KeyID string
	// key is that key, when Unseal found it.
	key *stamp.Hasher
}

// Key is the key Unseal checked the seal with (nil for a record it did not
// verify): the key to seal the record's next state with, whatever keys the
// keyring holds by then.
func (r Record) Key() *stamp.Hasher { return r.key }

// Keys finds an installation key, in force or previous, by its id
// (stamp.Keyring).
type Keys interface {
	ByID(id string) *stamp.Hasher
}

// Read parses the record of a workload as written, without checking its seal:
// for display only. An unknown state reads as None.
func Read(annotations map[string]string) Record {
	r := Record{Cause: annotations[AnnotationCause], Halted: annotations[AnnotationHalted], Verified: annotations[AnnotationVerified],
		Hold: annotations[AnnotationHold], Undo: annotations[AnnotationUndo]}
	switch c := Canary(annotations[AnnotationCanary]); c {
	case CanaryRunning, CanaryPassed:
		r.Canary = c
	}
	switch s := State(annotations[AnnotationState]); s {
	case Rolling, Verifying, Completed, Failed, Idle:
		r.State = s
	}
	if t, err := time.Parse(time.RFC3339, annotations[AnnotationStarted]); err == nil {
		r.Started = t
	}
	if t, err := time.Parse(time.RFC3339, annotations[AnnotationVerifyUntil]); err == nil {
		r.Until = t
	}
	if id, _, ok := strings.Cut(annotations[AnnotationSeal], "."); ok {
		r.KeyID = id
	}
	return r
}

// Unseal returns obj's record when configstamp wrote it (its seal verifies
// with one of keys), else the empty record and why it counts for nothing. A
// workload with no record at all gives the empty record and no error.
func Unseal(obj client.Object, keys Keys) (Record, error) {
	a := obj.GetAnnotations()
	seal, sealed := a[AnnotationSeal]
	if !sealed {
		for _, k := range RecordAnnotations {
			if _, ok := a[k]; ok {
				return Record{}, fmt.Errorf("%s is set but the record carries no %s: configstamp did not write it", k, AnnotationSeal)
			}
		}
		return Record{}, nil
	}
	r := Read(a)
	h := keys.ByID(r.KeyID)
	if h == nil {
		return Record{}, fmt.Errorf("the record is sealed with a key configstamp does not have (%q)", r.KeyID)
	}
	if !hmac.Equal([]byte(seal), []byte(r.seal(obj.GetUID(), h))) {
		return Record{}, fmt.Errorf("the record's %s does not match it: it was changed, or copied from another object, by someone else than configstamp", AnnotationSeal)
	}
	r.key = h
	return r, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// seal is the record's MAC. Until, Verified, Canary, Hold and Undo are sealed only when set, so
// records sealed before they existed (an upgrade) still verify.
func (r Record) seal(uid types.UID, h *stamp.Hasher) string {
	fields := []string{string(uid), string(r.State), formatTime(r.Started), r.Cause, r.Halted}
	if !r.Until.IsZero() {
		fields = append(fields, formatTime(r.Until))
	}
	if r.Verified != "" {
		fields = append(fields, "verified="+r.Verified)
	}
	if r.Canary != NoCanary {
		fields = append(fields, "canary="+string(r.Canary))
	}
	if r.Hold != "" {
		fields = append(fields, "hold="+r.Hold)
	}
	if r.Undo != "" {
		fields = append(fields, "undo="+r.Undo)
	}
	return h.KeyID() + "." + h.Seal(domainRecord, fields...)
}

// Annotations is r as the metadata annotations to merge-patch on the workload
// whose UID is uid, sealed with h (nil deletes an empty field). h must be the
// key r's content ids are made with.
func (r Record) Annotations(uid types.UID, h *stamp.Hasher) map[string]any {
	r.KeyID = h.KeyID()
	orNil := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return map[string]any{
		AnnotationState:       orNil(string(r.State)),
		AnnotationStarted:     orNil(formatTime(r.Started)),
		AnnotationVerifyUntil: orNil(formatTime(r.Until)),
		AnnotationCause:       orNil(r.Cause),
		AnnotationHalted:      orNil(r.Halted),
		AnnotationVerified:    orNil(r.Verified),
		AnnotationCanary:      orNil(string(r.Canary)),
		AnnotationHold:        orNil(r.Hold),
		AnnotationUndo:        orNil(r.Undo),
		AnnotationSeal:        r.seal(uid, h),
	}
}

// Open reports whether the record is a rollout under way (rolling or verifying).
func (r Record) Open() bool { return r.State == Rolling || r.State == Verifying }

// Transitions.

// StartRecord is a rollout starting at now for causes. idle says that its
// workload can make no pod of it now (workload.Status.Idle): it is Idle, and
// holds no slot. The last verified revision is the previous record's.
func (r Record) StartRecord(now time.Time, causes []Change, idle bool) Record {
	state := Rolling
	if idle {
		state = Idle
	}
	return Record{State: state, Started: now.Truncate(time.Second), Cause: FormatChanges(causes), Verified: r.Verified}
}

// StartRecord is a rollout starting at now for causes on a workload with
// no record (Record.StartRecord).
func StartRecord(now time.Time, causes []Change, idle bool) Record {
	return Record{}.StartRecord(now, causes, idle)
}

// Unidle: an Idle rollout's workload makes pods of it now (resumed, scaled
// up): it is judged as a rollout started now.
func (r Record) Unidle(now time.Time) Record {
	r.State, r.Started = Rolling, now.Truncate(time.Second)
	return r
}

// AsCanary makes a starting rollout its change's canary, held at one new
// pod by hold ("" when the whole workload is the canary).
func (r Record) AsCanary(hold string) Record {
	r.Canary, r.Hold = CanaryRunning, hold
	return r
}

// PassCanary: the canary passed; its hold is put back in the same write.
func (r Record) PassCanary() Record {
	r.Canary, r.Hold = CanaryPassed, ""
	return r
}

// StartVerifying is a rollout complete as `kubectl rollout status` says, to be
// watched until until before it counts as completed. It keeps its slot.
func (r Record) StartVerifying(until time.Time) Record {
	r.State, r.Until = Verifying, until.Truncate(time.Second)
	return r
}

// Complete closes a rollout that completed (verified); its revision, of
// identity stamp (VerifiedID.String), is the last verified one ("" keeps the
// one before: a rollout with nothing to verify). An undo's rollout closes back into the
// failure it undid (undone).
func (r Record) Complete(stamp string) Record {
	if r.Undo != "" {
		return r.undone()
	}
	r.State, r.Halted, r.Until, r.Hold = Completed, "", time.Time{}, ""
	if stamp != "" {
		r.Verified = stamp
	}
	return r
}

// Fail closes a rollout that failed; halt records its cause as halted. A
// halting canary keeps its hold (no second pod gets the halted change);
// without a halt the hold is put back. An undo's rollout closes back into
// the failure it undid (undone): an undo is never undone, nor halts more.
func (r Record) Fail(halt bool) Record {
	if r.Undo != "" {
		return r.undone()
	}
	r.State, r.Halted, r.Until = Failed, "", time.Time{}
	if halt {
		r.Halted = r.Cause
	} else {
		r.Hold = ""
	}
	return r
}

// StartUndo is the rollout of configstamp's undo, at now, of the failure r
// closed, to the revision stamped to: followed and verified like any
// rollout (it holds a slot until it closes), while the failure's halt and
// hold stay as they were. No canary: the revision is one that passed.
func (r Record) StartUndo(now time.Time, to string) Record {
	r.State, r.Started, r.Until, r.Canary, r.Undo = Rolling, now.Truncate(time.Second), time.Time{}, NoCanary, to
	return r
}

// undone closes an undo's rollout, passed or failed, back into the failure
// it undid: failed, its halt and hold as they were.
func (r Record) undone() Record {
	r.State, r.Until, r.Undo = Failed, time.Time{}, ""
	return r
}

// Resume lifts the halt the record carries (and puts a canary's hold back).
func (r Record) Resume() Record {
	r.Halted, r.Hold = "", ""
	return r
}

// Unhold puts a canary's hold back and keeps the rest as it was (a halt,
// an open rollout): its workload left configstamp's care (released).
func (r Record) Unhold() Record {
	r.Hold = ""
	return r
}

// Change identifies what a workload references of one source, as it was:
// Content is the keyed, key-precise digest of the referenced keys
// (stamp.Result.Sources, made with the record's key), or "unreferenced". The
// same referenced data gives the same Change whatever the source's other keys,
// metadata or resourceVersion.
type Change struct {
	Ref     stamp.ObjectRef
	Content string
}

func (c Change) String() string { return c.Ref.String() + "@" + c.Content }

// FormatChanges renders changes sorted, comma-separated.
func FormatChanges(cs []Change) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// ParseChanges is the tolerant inverse of FormatChanges (bad items are skipped).
func ParseChanges(s string) []Change {
	var out []Change
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		at := strings.LastIndexByte(item, '@')
		if at <= 0 || at == len(item)-1 {
			continue
		}
		ref, err := stamp.ParseObjectRef(item[:at])
		if err != nil {
			continue
		}
		out = append(out, Change{Ref: ref, Content: item[at+1:]})
	}
	return out
}

// Priority reads AnnotationPriority; absent is 0, malformed a Problem and 0.
func Priority(annotations map[string]string) (int, *stamp.Problem) {
	v, ok := annotations[AnnotationPriority]
	if !ok {
		return 0, nil
	}
	p, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, &stamp.Problem{Field: "annotation " + AnnotationPriority, Value: v, Message: "is not an integer"}
	}
	return p, nil
}

// Debounce reads AnnotationDebounce; absent gives def, malformed or negative a Problem and def.
func Debounce(annotations map[string]string, def time.Duration) (time.Duration, *stamp.Problem) {
	return durationAnnotation(annotations, AnnotationDebounce, def, "5s")
}

// durationAnnotation reads the non-negative Go duration of annotation key;
// absent gives def, malformed or negative a Problem (naming example) and def.
func durationAnnotation(annotations map[string]string, key string, def time.Duration, example string) (time.Duration, *stamp.Problem) {
	v, ok := annotations[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return def, &stamp.Problem{Field: "annotation " + key, Value: v, Message: "is not a non-negative duration such as " + example}
	}
	return d, nil
}
