package stamp

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Problem is a bad user-supplied value. It is reported (admission warning, Warning
// event) and the value is ignored; it is never fatal.
type Problem struct {
	Field   string // where the value came from, e.g. "annotation configstamp.io/ignore"
	Value   string // the offending value, verbatim
	Message string // what is wrong with it
}

// String renders the problem for an event or an admission warning, e.g.
// `annotation configstamp.io/extra-configmaps: "Bad_Name" is not a valid ConfigMap name: ...`.
func (p Problem) String() string { return fmt.Sprintf("%s: %q %s", p.Field, p.Value, p.Message) }

// Bounds on what a workload's extra-configmaps / extra-secrets annotations can
// cost: every name is a live read at admission and an entry in the records.
const (
	// MaxExtraNames is the number of distinct names read from each annotation.
	MaxExtraNames = 64
	// MaxExtraBytes is the length of each annotation's value that is read.
	MaxExtraBytes = 16 << 10
	// maxNameProblems is the number of invalid names reported one by one per
	// annotation; one more Problem says that further ones are not reported.
	maxNameProblems = 5
	// maxProblemValue bounds Problem.Value (events, admission warnings).
	maxProblemValue = 256
)

// clip bounds a user value quoted in a Problem.
func clip(v string) string {
	if len(v) > maxProblemValue {
		return v[:maxProblemValue] + "…"
	}
	return v
}

// extraNames reads one extra-* annotation value: the distinct valid names in
// order, up to MaxExtraNames, and the problems. Reading stops at the first item
// that does not end within the first MaxExtraBytes bytes, or that is a valid name
// beyond MaxExtraNames; that item and everything after it are ignored and
// reported as one Problem. keep is the length of the prefix of value that gives
// the same names (see BoundWorkloadAnnotations).
func extraNames(annotation string, kind Kind, value string) (names []string, problems []Problem, keep int) {
	field := "annotation " + annotation
	seen := map[string]bool{}
	invalid := 0
	for start := 0; start < len(value); {
		stop := strings.IndexByte(value[start:], ',')
		if stop < 0 {
			stop = len(value)
		} else {
			stop += start
		}
		name := strings.TrimSpace(value[start:stop])
		itemStart := start
		start = stop + 1
		if name == "" {
			continue
		}
		errs := validation.IsDNS1123Subdomain(name)
		switch {
		case stop > MaxExtraBytes:
			problems = append(problems, Problem{Field: field, Value: clip(name),
				Message: fmt.Sprintf("and every name after it are ignored: only the first %d bytes are read", MaxExtraBytes)})
			return names, problems, min(itemStart, MaxExtraBytes)
		case len(errs) == 0 && !seen[name] && len(names) == MaxExtraNames:
			problems = append(problems, Problem{Field: field, Value: clip(name),
				Message: fmt.Sprintf("and every name after it are ignored: at most %d %ss are read", MaxExtraNames, kind)})
			return names, problems, stop // the name is short: keep it, the cut gives this problem too
		case len(errs) > 0:
			invalid++
			switch {
			case invalid <= maxNameProblems:
				problems = append(problems, Problem{Field: field, Value: clip(name),
					Message: fmt.Sprintf("is not a valid %s name: %s", kind, strings.Join(errs, "; "))})
			case invalid == maxNameProblems+1:
				problems = append(problems, Problem{Field: field, Value: clip(name),
					Message: fmt.Sprintf("is not a valid %s name either; further invalid names are ignored and not reported", kind)})
			}
		case !seen[name]:
			seen[name] = true
			names = append(names, name)
		}
	}
	return names, problems, len(value)
}

// extraAnnotations are the annotations naming extra referenced objects.
var extraAnnotations = []struct {
	annotation string
	kind       Kind
}{{AnnotationExtraConfigMaps, KindConfigMap}, {AnnotationExtraSecrets, KindSecret}}

// WorkloadRefs returns the template references of spec plus the objects named in the
// extra-configmaps / extra-secrets annotations (comma-separated, surrounding spaces
// trimmed, empty items skipped; each name must be a DNS-1123 subdomain, otherwise it is
// reported as a Problem and skipped). Extra objects count with all their keys. Each
// annotation counts at most MaxExtraNames distinct names within its first
// MaxExtraBytes bytes; the rest is ignored and reported as a Problem.
func WorkloadRefs(annotations map[string]string, spec *corev1.PodSpec) (*Refs, []Problem) {
	refs := NewRefs()
	AddTemplateRefs(refs, spec)
	var problems []Problem
	for _, extra := range extraAnnotations {
		names, ps, _ := extraNames(extra.annotation, extra.kind, annotations[extra.annotation])
		for _, name := range names {
			refs.AddAll(ObjectRef{Kind: extra.kind, Name: name})
		}
		problems = append(problems, ps...)
	}
	return refs, problems
}

// BoundWorkloadAnnotations cuts the extra-* annotations of a workload (in place) to
// at most MaxExtraBytes bytes each, for the informer cache: the cut map gives exactly
// the references of the whole one, and the same problems except the one saying that
// names beyond MaxExtraBytes are ignored (the webhook reports that at admission).
func BoundWorkloadAnnotations(annotations map[string]string) {
	for _, extra := range extraAnnotations {
		v, ok := annotations[extra.annotation]
		if !ok {
			continue
		}
		if _, _, end := extraNames(extra.annotation, extra.kind, v); end < len(v) {
			annotations[extra.annotation] = strings.Clone(v[:end])
		}
	}
}

// maxBoolLength bounds a boolean value, spaces included: anything longer is no
// boolean (so that a value the cache keeps cut, see MaxKeptAnnotation, reads the same).
const maxBoolLength = 64

// ParseBool accepts exactly "true" or "false", case-insensitive, surrounding spaces
// trimmed. Anything else (including "", "1", "yes") is an error naming the value.
func ParseBool(s string) (bool, error) {
	if len(s) > maxBoolLength {
		return false, fmt.Errorf("%q is not a boolean: use \"true\" or \"false\"", clip(s))
	}
	switch t := strings.TrimSpace(s); {
	case strings.EqualFold(t, "true"):
		return true, nil
	case strings.EqualFold(t, "false"):
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean: use \"true\" or \"false\"", s)
}

// boolProblem parses a boolean label/annotation value; an unparseable value yields a Problem.
func boolProblem(field, value string) (bool, *Problem) {
	b, err := ParseBool(value)
	if err != nil {
		return false, &Problem{Field: field, Value: clip(value), Message: `is not a boolean: use "true" or "false"; ignored`}
	}
	return b, nil
}

// Enabled reports whether a workload is opted in. The workload's LabelEnabled wins
// when it parses; otherwise the namespace's LabelEnabled decides; otherwise false.
// A present but unparseable value (including "") is a Problem and treated as absent.
func Enabled(workloadLabels, namespaceLabels map[string]string) (bool, []Problem) {
	return Setting("label", LabelEnabled, workloadLabels, namespaceLabels)
}

// Setting reads a boolean setting of a workload that its Namespace may set
// for every workload in it: the workload's value, if it is a valid boolean,
// wins over the namespace's; neither valid is false. what names the kind of
// field ("label", "annotation") in the problems a bad value gives.
func Setting(what, key string, workload, namespace map[string]string) (bool, []Problem) {
	var problems []Problem
	if v, ok := workload[key]; ok {
		b, p := boolProblem(what+" "+key, v)
		if p == nil {
			return b, nil
		}
		problems = append(problems, *p)
	}
	if v, ok := namespace[key]; ok {
		b, p := boolProblem("namespace "+what+" "+key, v)
		if p == nil {
			return b, problems
		}
		problems = append(problems, *p)
	}
	return false, problems
}

// MaxSelectorLength bounds a rollout selector; a longer one is a Problem.
const MaxSelectorLength = 4096

// MaxReferences bounds the ConfigMaps and Secrets one workload may reference
// (template, extra-* annotations and rollout selectors together), so one
// admission or reconcile reads at most this many objects. A workload over it
// is neither stamped nor rolled, with a warning and an event.
const MaxReferences = 256

// RolloutSelector reads AnnotationRolloutSelector or, when that is unset or blank, its
// alias AnnotationPodDeleteMatch. ok is false when neither is set to a non-blank value.
// A selector that does not parse (labels.Parse), or that would match everything, is a
// Problem and ok is false; the alias is not consulted when the primary annotation is set.
func RolloutSelector(annotations map[string]string) (sel labels.Selector, ok bool, problem *Problem) {
	name := AnnotationRolloutSelector
	value := annotations[name]
	if strings.TrimSpace(value) == "" {
		name = AnnotationPodDeleteMatch
		value = annotations[name]
		if strings.TrimSpace(value) == "" {
			return nil, false, nil
		}
	}
	if len(value) > MaxSelectorLength {
		return nil, false, &Problem{Field: "annotation " + name, Value: clip(value),
			Message: fmt.Sprintf("is longer than %d bytes; ignored", MaxSelectorLength)}
	}
	sel, err := labels.Parse(value)
	if err != nil {
		return nil, false, &Problem{Field: "annotation " + name, Value: clip(value),
			Message: "is not a valid label selector: " + err.Error()}
	}
	if sel.Empty() {
		return nil, false, &Problem{Field: "annotation " + name, Value: clip(value),
			Message: "selects every workload; ignored"}
	}
	return sel, true, nil
}

// Ignored reports whether a ConfigMap/Secret carries AnnotationIgnore="true" (see
// ParseBool). An unparseable value is a Problem and the object is not ignored.
func Ignored(annotations map[string]string) (bool, *Problem) {
	v, ok := annotations[AnnotationIgnore]
	if !ok {
		return false, nil
	}
	return boolProblem("annotation "+AnnotationIgnore, v)
}

// MaxRecordBytes bounds the record annotations AnnotationSources and
// AnnotationSourceVersions together, names and values, so that configstamp never
// pushes a workload over the API server's 256 KiB limit on all annotations. About
// 200 referenced objects with 20-character names fit.
const MaxRecordBytes = 16 << 10

// FormatRecord returns the values of AnnotationSources and AnnotationSourceVersions
// for a computation's short digests and versions, or ok == false when together they
// would exceed MaxRecordBytes: the caller then writes neither (removes both). Without
// a record the hash and stamp stay exact; what is lost is naming the changed objects
// (in events and rollout causes) and accepting the reconciler's proposals without a
// live read (the webhook re-reads, as for any proposal without versions). The webhook
// and the reconciler both use it, so they write the same record.
func FormatRecord(sources, versions map[ObjectRef]string) (src, ver string, ok bool) {
	src, ver = FormatSources(sources), FormatVersions(versions)
	if len(AnnotationSources)+len(src)+len(AnnotationSourceVersions)+len(ver) > MaxRecordBytes {
		return "", "", false
	}
	return src, ver, true
}
