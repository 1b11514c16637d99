package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// AnnotationRotateTogether (user, on a workload): sources it references that
// change together, "Kind/name" separated by commas (two Secrets the External
// Secrets Operator writes from one rotation in the store, each on its own
// refresh). A change of one of them waits for the others, at most
// AnnotationRotateTogetherWait from the first, so that no pod starts with half
// of the new set; once they all changed it rolls as one change.
const AnnotationRotateTogether = "configstamp.io/rotate-together"

// AnnotationRotateTogetherWait (user, on a workload): how long a change of one
// source of AnnotationRotateTogether waits for the others, a Go duration of at
// most MaxRotateTogetherWait (default DefaultRotateTogetherWait). When it runs
// out, the workload rolls what changed, with a Warning RotationIncomplete.
const AnnotationRotateTogetherWait = "configstamp.io/rotate-together-wait"

const (
	// DefaultRotateTogetherWait is AnnotationRotateTogetherWait's default.
	DefaultRotateTogetherWait = 10 * time.Minute
	// MaxRotateTogetherWait bounds AnnotationRotateTogetherWait: a source
	// that never changes holds the others back no longer.
	MaxRotateTogetherWait = 6 * time.Hour
)

// ReasonRotationIncomplete: a rollout of some sources of a rotate-together
// group started when the group's wait ran out, the others unchanged.
const ReasonRotationIncomplete = "RotationIncomplete"

// Rotation is a workload's rotate-together group: sources it references
// that change together, and how long a change of some waits for the rest.
type Rotation struct {
	Members []stamp.ObjectRef
	Wait    time.Duration
}

// RotationOf reads AnnotationRotateTogether and AnnotationRotateTogetherWait
// of a workload that references the sources of referenced. A member that is
// malformed or not referenced is left out, with a Problem; a group of fewer
// than two members is none.
func RotationOf(annotations map[string]string, referenced map[stamp.ObjectRef]string) (Rotation, []stamp.Problem) {
	v, ok := annotations[AnnotationRotateTogether]
	if !ok {
		return Rotation{}, nil
	}
	var r Rotation
	var problems []stamp.Problem
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ref, err := stamp.ParseObjectRef(s)
		if err == nil {
			if _, known := referenced[ref]; !known {
				err = fmt.Errorf("%s is not referenced by this workload's pod template", ref)
			}
		}
		if err != nil {
			problems = append(problems, stamp.Problem{Field: "annotation " + AnnotationRotateTogether, Value: v,
				Message: err.Error() + ": left out of the group"})
			continue
		}
		if !slices.Contains(r.Members, ref) {
			r.Members = append(r.Members, ref)
		}
	}
	wait, p := durationAnnotation(annotations, AnnotationRotateTogetherWait, DefaultRotateTogetherWait, "15m")
	if p == nil && wait > MaxRotateTogetherWait {
		wait, p = MaxRotateTogetherWait, &stamp.Problem{Field: "annotation " + AnnotationRotateTogetherWait, Value: annotations[AnnotationRotateTogetherWait],
			Message: "is more than " + MaxRotateTogetherWait.String() + ": " + MaxRotateTogetherWait.String() + " is used"}
	}
	if p != nil {
		problems = append(problems, *p)
	}
	if len(r.Members) < 2 {
		return Rotation{}, problems
	}
	r.Wait = wait
	return r, problems
}

// Missing are the members of the group that causes does not change while
// it changes another (the rest of a rotation not seen yet); nil when causes
// change none of the group, or all of it.
func (r Rotation) Missing(causes []Change) []stamp.ObjectRef {
	var changed, missing []stamp.ObjectRef
	for _, m := range r.Members {
		if slices.ContainsFunc(causes, func(c Change) bool { return c.Ref == m }) {
			changed = append(changed, m)
		} else {
			missing = append(missing, m)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return missing
}

// rotationRest are the members of its rotate-together group that the
// change it would roll out waits for (Rotation.Missing), less those its last
// rollout rolled when that was the first part of a rotation, rolled when
// the group's wait ran out, less than a wait ago: the rest completes it,
// and waits no longer.
func (sit Situation) rotationRest() []stamp.ObjectRef {
	r := sit.Rotation
	rest := r.Missing(sit.Causes)
	if len(rest) == 0 || sit.Record.Started.IsZero() || sit.Now.Sub(sit.Record.Started) > r.Wait {
		return rest
	}
	last := ParseChanges(sit.Record.Cause)
	if part := r.Missing(last); len(part) == 0 { // the last rollout rolled none of the group, or all of it
		return rest
	}
	rolled := refsOf(last)
	return slices.DeleteFunc(rest, func(m stamp.ObjectRef) bool { return slices.Contains(rolled, m) })
}

// together is how long, from the first sight of its change, the rollout
// waits for the rest of its rotation (0: nothing to wait for).
func (sit Situation) together() time.Duration {
	if len(sit.RotationRest) == 0 {
		return 0
	}
	return sit.Rotation.Wait
}
