package workload

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestScope(t *testing.T) {
	type probe struct {
		ns     string
		labels map[string]string
		in     bool
	}
	team := map[string]string{"team": "a"}
	for name, tc := range map[string]struct {
		watch, exclude []string
		selector       string
		wantWatch      []string
		wantExclude    []string
		probes         []probe
	}{
		"everything but own and kube-system": {
			wantExclude: []string{"configstamp-system", "kube-system"},
			probes: []probe{{"a", nil, true}, {"configstamp-system", nil, false}, {"kube-system", nil, false},
				{"kube-public", nil, true}},
		},
		"excluded": {
			exclude: []string{" c ", "", "c", "d"}, wantExclude: []string{"c", "configstamp-system", "d", "kube-system"},
			probes: []probe{{"a", nil, true}, {"c", nil, false}, {"d", nil, false}},
		},
		"watched": {
			watch: []string{"b", "a", "kube-system"}, exclude: []string{"c"},
			wantWatch: []string{"a", "b"}, wantExclude: []string{"configstamp-system", "kube-system"},
			probes: []probe{{"a", nil, true}, {"b", nil, true}, {"c", nil, false}, {"kube-system", nil, false}},
		},
		"watched and excluded": {
			watch: []string{"a", "b"}, exclude: []string{"b"},
			wantWatch: []string{"a"}, wantExclude: []string{"configstamp-system", "kube-system"},
			probes: []probe{{"a", nil, true}, {"b", nil, false}},
		},
		"selector": {
			selector: "team=a,env!=dev,!legacy", wantExclude: []string{"configstamp-system", "kube-system"},
			probes: []probe{{"a", team, true}, {"a", nil, false}, {"kube-system", team, false}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := NewScope("configstamp-system", tc.watch, tc.exclude, tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Watched(), tc.wantWatch) || !slices.Equal(s.Excluded(), tc.wantExclude) {
				t.Errorf("watched %v excluded %v, want %v %v", s.Watched(), s.Excluded(), tc.wantWatch, tc.wantExclude)
			}
			sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: s.NamespaceSelector()})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.probes {
				if got := s.InScope(p.ns, p.labels); got != p.in {
					t.Errorf("InScope(%s, %v) = %v, want %v", p.ns, p.labels, got, p.in)
				}
				// The webhook's namespaceSelector says the same as the reconciler's check.
				l := labels.Set{NamespaceNameLabel: p.ns}
				for k, v := range p.labels {
					l[k] = v
				}
				if got := sel.Matches(l); got != p.in {
					t.Errorf("namespaceSelector %v on %s %v = %v, want %v", sel, p.ns, p.labels, got, p.in)
				}
			}
		})
	}
}

func TestScopeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		watch, exclude []string
		selector       string
	}{
		"only excluded watched": {watch: []string{"kube-system", "configstamp-system"}},
		"bad name":              {exclude: []string{"Not_A_Name"}},
		"bad watch name":        {watch: []string{"a/b"}},
		"bad selector":          {selector: "team in (a"},
		"gt in a selector":      {selector: "size>3"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewScope("configstamp-system", tc.watch, tc.exclude, tc.selector); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestNilScopeContainsEverything(t *testing.T) {
	var s *Scope
	if !s.InScope("kube-system", nil) || !s.NameInScope("x") {
		t.Fatal("a nil Scope must contain every namespace")
	}
}
