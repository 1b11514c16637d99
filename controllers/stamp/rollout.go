package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rollout-safety annotations. The state a new leader needs lives on the
// workloads themselves, so nothing is lost across restarts.
const (
	// AnnotationRolloutStarted (workload metadata): RFC 3339 time at which
	// configstamp stamped the template; present while the rollout holds a slot.
	AnnotationRolloutStarted = "configstamp.io/rollout-started"
	// AnnotationRolloutCause (workload metadata): the changes that caused the
	// current rollout, as FormatChanges.
	AnnotationRolloutCause = "configstamp.io/rollout-cause"
	// AnnotationHalted (workload metadata): the changes whose rollout failed on
	// this workload; further rollouts caused by exactly these changes are halted.
	AnnotationHalted = "configstamp.io/halted"
	// AnnotationRolloutPriority (user, workload): an integer; higher goes first in a wave.
	AnnotationRolloutPriority = "configstamp.io/rollout-priority"
	// AnnotationDebounce (user, workload): a Go duration overriding --debounce.
	AnnotationDebounce = "configstamp.io/debounce"
)

// Change identifies one content of one source: the same ConfigMap data gives
// the same Change whatever its metadata or resourceVersion.
type Change struct {
	Ref     ObjectRef
	Content string // ContentID of the source
}

func (c Change) String() string { return c.Ref.String() + "@" + c.Content }

// ContentID digests all of a source's data (every key), or "absent".
func ContentID(src Source) string {
	if !src.Present {
		return "absent"
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(src.Digests)) {
		_, _ = fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(src.Digests[k]), src.Digests[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

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
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		at := strings.LastIndexByte(item, '@')
		if at <= 0 || at == len(item)-1 {
			continue
		}
		ref, err := ParseObjectRef(item[:at])
		if err != nil {
			continue
		}
		out = append(out, Change{Ref: ref, Content: item[at+1:]})
	}
	return out
}

// Priority reads AnnotationRolloutPriority; absent is 0, malformed a Problem and 0.
func Priority(annotations map[string]string) (int, *Problem) {
	v, ok := annotations[AnnotationRolloutPriority]
	if !ok {
		return 0, nil
	}
	p, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, &Problem{Field: "annotation " + AnnotationRolloutPriority, Value: v, Message: "is not an integer"}
	}
	return p, nil
}

// Debounce reads AnnotationDebounce; absent gives def, malformed or negative a Problem and def.
func Debounce(annotations map[string]string, def time.Duration) (time.Duration, *Problem) {
	v, ok := annotations[AnnotationDebounce]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return def, &Problem{Field: "annotation " + AnnotationDebounce, Value: v, Message: "is not a non-negative duration such as 5s"}
	}
	return d, nil
}
