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

// WorkloadRefs returns the template references of spec plus the objects named in the
// extra-configmaps / extra-secrets annotations (comma-separated, surrounding spaces
// trimmed, empty items skipped; each name must be a DNS-1123 subdomain, otherwise it is
// reported as a Problem and skipped). Extra objects count with all their keys.
func WorkloadRefs(annotations map[string]string, spec *corev1.PodSpec) (*Refs, []Problem) {
	refs := NewRefs()
	AddTemplateRefs(refs, spec)
	var problems []Problem
	for _, extra := range []struct {
		annotation string
		kind       Kind
	}{{AnnotationExtraConfigMaps, KindConfigMap}, {AnnotationExtraSecrets, KindSecret}} {
		for item := range strings.SplitSeq(annotations[extra.annotation], ",") {
			name := strings.TrimSpace(item)
			if name == "" {
				continue
			}
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				problems = append(problems, Problem{
					Field:   "annotation " + extra.annotation,
					Value:   name,
					Message: fmt.Sprintf("is not a valid %s name: %s", extra.kind, strings.Join(errs, "; ")),
				})
				continue
			}
			refs.AddAll(ObjectRef{Kind: extra.kind, Name: name})
		}
	}
	return refs, problems
}

// ParseBool accepts exactly "true" or "false", case-insensitive, surrounding spaces
// trimmed. Anything else (including "", "1", "yes") is an error naming the value.
func ParseBool(s string) (bool, error) {
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
		return false, &Problem{Field: field, Value: value, Message: `is not a boolean: use "true" or "false"; ignored`}
	}
	return b, nil
}

// Enabled reports whether a workload is opted in. The workload's LabelEnabled wins
// when it parses; otherwise the namespace's LabelEnabled decides; otherwise false.
// A present but unparseable value (including "") is a Problem and treated as absent.
func Enabled(workloadLabels, namespaceLabels map[string]string) (bool, []Problem) {
	var problems []Problem
	if v, ok := workloadLabels[LabelEnabled]; ok {
		b, p := boolProblem("label "+LabelEnabled, v)
		if p == nil {
			return b, nil
		}
		problems = append(problems, *p)
	}
	if v, ok := namespaceLabels[LabelEnabled]; ok {
		b, p := boolProblem("namespace label "+LabelEnabled, v)
		if p == nil {
			return b, problems
		}
		problems = append(problems, *p)
	}
	return false, problems
}

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
	sel, err := labels.Parse(value)
	if err != nil {
		return nil, false, &Problem{Field: "annotation " + name, Value: value,
			Message: "is not a valid label selector: " + err.Error()}
	}
	if sel.Empty() {
		return nil, false, &Problem{Field: "annotation " + name, Value: value,
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
