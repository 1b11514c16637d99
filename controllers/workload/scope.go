package workload

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NamespaceNameLabel is the label the API server sets on every Namespace to
// its name; admission namespaceSelectors select namespaces by name with it.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// KubeSystem is always out of scope, like configstamp's own namespace.
const KubeSystem = "kube-system"

// Scope says in which namespaces an installation of configstamp acts. The
// webhook (its namespaceSelector and a check in its handler) and the
// reconciler (its cache and a check before it computes anything) use the same
// Scope, so a workload is stamped by both paths or by neither.
//
// A namespace is in scope when
//   - it is not excluded: configstamp's own namespace and kube-system always
//     are, plus --exclude-namespaces;
//   - it is watched: every namespace, or only the --watch-namespaces;
//   - its labels match --namespace-selector (every namespace without one).
//
// The first two are names, known at start: the cache holds only those
// namespaces, so memory follows them. The selector is about labels, which
// change: it filters what is cached, it does not shrink the cache.
type Scope struct {
	own      string
	watch    []string
	exclude  []string
	selector *metav1.LabelSelector
	labels   labels.Selector
}

// NewScope builds the Scope of an installation whose own namespace is own.
// watch and exclude are namespace names (empty entries are ignored);
// selector is a label selector in kubectl's syntax ("" selects every
// namespace). A watched namespace that is also excluded is out of scope; a
// watch list that is entirely excluded is an error (it would otherwise mean
// "every namespace").
func NewScope(own string, watch, exclude []string, selector string) (*Scope, error) {
	s := &Scope{own: own, labels: labels.Everything()}
	var err error
	if s.exclude, err = names("--exclude-namespaces", append([]string{own, KubeSystem}, exclude...)); err != nil {
		return nil, err
	}
	if s.watch, err = names("--watch-namespaces", watch); err != nil {
		return nil, err
	}
	if len(s.watch) > 0 {
		s.watch = slices.DeleteFunc(s.watch, func(n string) bool { return slices.Contains(s.exclude, n) })
		if len(s.watch) == 0 {
			return nil, fmt.Errorf("--watch-namespaces=%s: every namespace listed is excluded (configstamp's own namespace and %s always are)",
				strings.Join(watch, ","), KubeSystem)
		}
		// Outside the watch list nothing is cached: excluding more is moot.
		s.exclude = slices.DeleteFunc(s.exclude, func(n string) bool { return n != own && n != KubeSystem })
	}
	if strings.TrimSpace(selector) != "" {
		if s.labels, err = labels.Parse(selector); err != nil {
			return nil, fmt.Errorf("--namespace-selector=%q: %w", selector, err)
		}
		if s.selector, err = asLabelSelector(s.labels); err != nil {
			return nil, fmt.Errorf("--namespace-selector=%q: %w", selector, err)
		}
	}
	return s, nil
}

// asLabelSelector turns a parsed selector into the requirements an admission
// namespaceSelector takes (no gt/lt there).
func asLabelSelector(sel labels.Selector) (*metav1.LabelSelector, error) {
	reqs, _ := sel.Requirements()
	out := &metav1.LabelSelector{}
	for _, r := range reqs {
		req := metav1.LabelSelectorRequirement{Key: r.Key(), Values: r.ValuesUnsorted()}
		slices.Sort(req.Values)
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			req.Operator = metav1.LabelSelectorOpIn
		case selection.NotEquals, selection.NotIn:
			req.Operator = metav1.LabelSelectorOpNotIn
		case selection.Exists:
			req.Operator, req.Values = metav1.LabelSelectorOpExists, nil
		case selection.DoesNotExist:
			req.Operator, req.Values = metav1.LabelSelectorOpDoesNotExist, nil
		default:
			return nil, fmt.Errorf("a namespaceSelector takes =, ==, !=, in, notin, exists and !, not %q", r.Operator())
		}
		out.MatchExpressions = append(out.MatchExpressions, req)
	}
	return out, nil
}

// names trims, validates, sorts and de-duplicates namespace names.
func names(flag string, in []string) ([]string, error) {
	var out []string
	for _, n := range in {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("%s: %q is not a namespace name: %s", flag, n, strings.Join(errs, "; "))
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Own is configstamp's own namespace.
func (s *Scope) Own() string { return s.own }

// Watched are the namespaces the installation is limited to, sorted; empty
// when it watches every namespace but the excluded ones.
func (s *Scope) Watched() []string { return slices.Clone(s.watch) }

// Excluded are the namespaces never in scope, sorted: configstamp's own,
// kube-system and --exclude-namespaces (only the first two with a watch list).
func (s *Scope) Excluded() []string { return slices.Clone(s.exclude) }

// NameInScope reports whether a namespace of that name may be in scope (the
// watch and exclude lists; the label selector is not consulted). A nil Scope
// contains every namespace.
func (s *Scope) NameInScope(name string) bool {
	if s == nil {
		return true
	}
	if slices.Contains(s.exclude, name) {
		return false
	}
	return len(s.watch) == 0 || slices.Contains(s.watch, name)
}

// InScope reports whether the namespace name, with these labels, is in scope.
// A nil Scope contains every namespace.
func (s *Scope) InScope(name string, nsLabels map[string]string) bool {
	if s == nil {
		return true
	}
	return s.NameInScope(name) && s.labels.Matches(labels.Set(nsLabels))
}

// NamespaceSelector is the scope as requirements of an admission
// namespaceSelector: the exclusions (kubernetes.io/metadata.name NotIn; own
// namespace first), the watch list (In) and the label selector, all ANDed.
func (s *Scope) NamespaceSelector() []metav1.LabelSelectorRequirement {
	excluded := append([]string{s.own}, slices.DeleteFunc(slices.Clone(s.exclude), func(n string) bool { return n == s.own })...)
	out := []metav1.LabelSelectorRequirement{{Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: excluded}}
	if len(s.watch) > 0 {
		out = append(out, metav1.LabelSelectorRequirement{Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpIn, Values: slices.Clone(s.watch)})
	}
	if s.selector != nil {
		for _, r := range s.selector.MatchExpressions {
			r.Values = slices.Clone(r.Values)
			out = append(out, r)
		}
	}
	return out
}

// String describes the scope for logs.
func (s *Scope) String() string {
	w := "*"
	if len(s.watch) > 0 {
		w = strings.Join(s.watch, ",")
	}
	return fmt.Sprintf("watch=%s exclude=%s selector=%q", w, strings.Join(s.exclude, ","), s.labels.String())
}
