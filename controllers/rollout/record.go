// Package rollout is configstamp's rollout safety: the record of the rollout
// configstamp started on a workload (a small state machine kept in the
// workload's own annotations), when that rollout is complete or has failed for
// each kind and update strategy, and the Scheduler that spreads the rollouts of
// a shared change (debounce, budget of concurrent rollouts, rate, wave order,
// halts). It holds no client writes: the reconciler applies what it decides.
package rollout

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Rollout-safety annotations on a workload's metadata. The state a new leader
// needs lives on the workloads themselves, so nothing is lost across restarts.
const (
	// AnnotationState is the state of the last rollout configstamp started:
	// "rolling", "completed" or "failed" (see State).
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
)

// State is where the rollout configstamp started on a workload stands.
//
//	(none) --StartRecord--> Rolling --CompleteRecord--> Completed
//	                                \--FailRecord-----> Failed (--ResumeRecord: halt lifted)
//
// A new rollout (StartRecord) may follow Completed or Failed. Only Rolling holds a
// slot of the budget, and for at most the progress deadline. A record that
// has ended is never judged again: nothing that happens to the workload
// afterwards (a scale, a new node, an image bump) can make it fail.
type State string

const (
	// None: configstamp never started a rollout here, or the record predates
	// rollout-state (an older configstamp, whose rollouts count as ended).
	None      State = ""
	Rolling   State = "rolling"
	Completed State = "completed"
	Failed    State = "failed"
)

// Record is the rollout record read from a workload's annotations.
type Record struct {
	State   State
	Started time.Time // zero when absent or unreadable
	Cause   string
	Halted  string
}

// Read parses the record of a workload. An unknown state reads as None.
func Read(annotations map[string]string) Record {
	r := Record{Cause: annotations[AnnotationCause], Halted: annotations[AnnotationHalted]}
	switch s := State(annotations[AnnotationState]); s {
	case Rolling, Completed, Failed:
		r.State = s
	}
	if t, err := time.Parse(time.RFC3339, annotations[AnnotationStarted]); err == nil {
		r.Started = t
	}
	if r.State == None && r.Halted != "" {
		// Written before rollout-state existed: a halt was only ever recorded
		// on a failed rollout, so its recovery must lift it too.
		r.State = Failed
	}
	return r
}

// Open reports whether the record is a rollout under way.
func (r Record) Open() bool { return r.State == Rolling }

// Transitions, as the metadata annotations to merge-patch (nil deletes).

// StartRecord records a rollout starting at now for causes. ended says that it has
// nothing to wait for (OnDelete): it is complete at once and holds no slot.
func StartRecord(now time.Time, causes []Change, ended bool) map[string]any {
	state := Rolling
	if ended {
		state = Completed
	}
	return map[string]any{
		AnnotationState:   string(state),
		AnnotationStarted: now.UTC().Format(time.RFC3339),
		AnnotationCause:   FormatChanges(causes),
		AnnotationHalted:  nil,
	}
}

// CompleteRecord closes a rollout that completed.
func CompleteRecord() map[string]any { return map[string]any{AnnotationState: string(Completed)} }

// FailRecord closes a rollout that failed; halt records its cause as halted.
func FailRecord(r Record, halt bool) map[string]any {
	out := map[string]any{AnnotationState: string(Failed)}
	if halt && r.Cause != "" {
		out[AnnotationHalted] = r.Cause
	}
	return out
}

// ResumeRecord lifts the halt a workload carries.
func ResumeRecord() map[string]any { return map[string]any{AnnotationHalted: nil} }

// Change identifies one content of one source: the same data gives the same
// Change whatever its metadata or resourceVersion. Content is the keyed
// stamp.Hasher.ContentID, or "unreferenced".
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
	v, ok := annotations[AnnotationDebounce]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return def, &stamp.Problem{Field: "annotation " + AnnotationDebounce, Value: v, Message: "is not a non-negative duration such as 5s"}
	}
	return d, nil
}
