package stamp

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func TestParseBool(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    bool
		wantErr bool
	}{
		"true":         {in: "true", want: true},
		"false":        {in: "false", want: false},
		"True":         {in: "True", want: true},
		"FALSE":        {in: "FALSE", want: false},
		"spaces":       {in: "  true\t", want: true},
		"empty":        {in: "", wantErr: true},
		"blank":        {in: "   ", wantErr: true},
		"yes":          {in: "yes", wantErr: true},
		"1":            {in: "1", wantErr: true},
		"0":            {in: "0", wantErr: true},
		"t":            {in: "t", wantErr: true},
		"on":           {in: "on", wantErr: true},
		"quoted":       {in: `"true"`, wantErr: true},
		"true-ish":     {in: "truee", wantErr: true},
		"inner spaces": {in: "tr ue", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseBool(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseBool(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), strings.Trim(tc.in, " \t")) {
				t.Errorf("error %q does not name the value", err)
			}
			if got != tc.want {
				t.Errorf("ParseBool(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	l := func(v string) map[string]string { return map[string]string{LabelEnabled: v} }
	tests := map[string]struct {
		workload, namespace map[string]string
		want                bool
		wantProblems        []string // Problem.Field
	}{
		"neither":                      {want: false},
		"other labels only":            {workload: map[string]string{"app": "x"}, namespace: map[string]string{"team": "y"}, want: false},
		"workload true":                {workload: l("true"), want: true},
		"workload false":               {workload: l("false"), want: false},
		"namespace true":               {namespace: l("true"), want: true},
		"namespace false":              {namespace: l("false"), want: false},
		"workload false beats ns true": {workload: l("false"), namespace: l("true"), want: false},
		"workload true beats ns false": {workload: l("true"), namespace: l("false"), want: true},
		"workload case-insensitive":    {workload: l("TRUE"), want: true},
		"bad workload, ns true": {
			workload: l("yes"), namespace: l("true"), want: true,
			wantProblems: []string{"label " + LabelEnabled},
		},
		"bad workload, no ns": {
			workload: l("1"), want: false,
			wantProblems: []string{"label " + LabelEnabled},
		},
		"empty workload value is a problem": {
			workload: l(""), namespace: l("true"), want: true,
			wantProblems: []string{"label " + LabelEnabled},
		},
		"bad namespace": {
			namespace: l("enabled"), want: false,
			wantProblems: []string{"namespace label " + LabelEnabled},
		},
		"both bad": {
			workload: l("on"), namespace: l("y"), want: false,
			wantProblems: []string{"label " + LabelEnabled, "namespace label " + LabelEnabled},
		},
		"good workload hides bad namespace": {workload: l("true"), namespace: l("bad"), want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, problems := Enabled(tc.workload, tc.namespace)
			if got != tc.want {
				t.Errorf("Enabled = %v, want %v", got, tc.want)
			}
			if len(problems) != len(tc.wantProblems) {
				t.Fatalf("problems = %v, want fields %v", problems, tc.wantProblems)
			}
			for i, p := range problems {
				if p.Field != tc.wantProblems[i] || !strings.Contains(p.String(), "is not a boolean") {
					t.Errorf("problem %d = %q, want field %q", i, p, tc.wantProblems[i])
				}
			}
		})
	}
}

func TestRolloutSelector(t *testing.T) {
	app := func(v string) labels.Set { return labels.Set{"app": v} }
	tests := map[string]struct {
		annotations  map[string]string
		wantOK       bool
		wantProblem  string // Problem.Field, "" for none
		match, other labels.Set
	}{
		"none":             {},
		"unrelated":        {annotations: map[string]string{"x": "app=a"}},
		"primary":          {annotations: map[string]string{AnnotationRolloutSelector: "app=a"}, wantOK: true, match: app("a"), other: app("b")},
		"alias":            {annotations: map[string]string{AnnotationPodDeleteMatch: "app=a"}, wantOK: true, match: app("a"), other: app("b")},
		"primary wins":     {annotations: map[string]string{AnnotationRolloutSelector: "app=a", AnnotationPodDeleteMatch: "app=b"}, wantOK: true, match: app("a"), other: app("b")},
		"blank primary":    {annotations: map[string]string{AnnotationRolloutSelector: "  ", AnnotationPodDeleteMatch: "app=b"}, wantOK: true, match: app("b"), other: app("a")},
		"empty both":       {annotations: map[string]string{AnnotationRolloutSelector: "", AnnotationPodDeleteMatch: ""}},
		"set-based":        {annotations: map[string]string{AnnotationRolloutSelector: "app in (a, c), tier!=db"}, wantOK: true, match: labels.Set{"app": "c", "tier": "web"}, other: labels.Set{"app": "c", "tier": "db"}},
		"exists":           {annotations: map[string]string{AnnotationRolloutSelector: "app"}, wantOK: true, match: app("x"), other: labels.Set{"tier": "x"}},
		"unparseable":      {annotations: map[string]string{AnnotationRolloutSelector: "app=(a"}, wantProblem: "annotation " + AnnotationRolloutSelector},
		"bad operator":     {annotations: map[string]string{AnnotationRolloutSelector: "app=>a"}, wantProblem: "annotation " + AnnotationRolloutSelector},
		"bad alias":        {annotations: map[string]string{AnnotationPodDeleteMatch: "a b c"}, wantProblem: "annotation " + AnnotationPodDeleteMatch},
		"bad primary wins": {annotations: map[string]string{AnnotationRolloutSelector: "!!", AnnotationPodDeleteMatch: "app=a"}, wantProblem: "annotation " + AnnotationRolloutSelector},
		"bad label value":  {annotations: map[string]string{AnnotationRolloutSelector: "app=" + strings.Repeat("v", 64)}, wantProblem: "annotation " + AnnotationRolloutSelector},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sel, ok, problem := RolloutSelector(tc.annotations)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (problem %v)", ok, tc.wantOK, problem)
			}
			gotField := ""
			if problem != nil {
				gotField = problem.Field
				if !strings.Contains(problem.String(), "selector") && !strings.Contains(problem.String(), "selects") {
					t.Errorf("problem %q does not explain itself", problem)
				}
			}
			if gotField != tc.wantProblem {
				t.Fatalf("problem = %v, want field %q", problem, tc.wantProblem)
			}
			if !ok {
				if sel != nil {
					t.Errorf("sel = %v with ok=false", sel)
				}
				return
			}
			if !sel.Matches(tc.match) || sel.Matches(tc.other) {
				t.Errorf("selector %q: Matches(%v)=%v Matches(%v)=%v", sel, tc.match, sel.Matches(tc.match), tc.other, sel.Matches(tc.other))
			}
		})
	}
}

func TestIgnored(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		want        bool
		wantProblem bool
	}{
		"absent":      {},
		"true":        {annotations: map[string]string{AnnotationIgnore: "true"}, want: true},
		"True spaced": {annotations: map[string]string{AnnotationIgnore: " True "}, want: true},
		"false":       {annotations: map[string]string{AnnotationIgnore: "false"}},
		"empty":       {annotations: map[string]string{AnnotationIgnore: ""}, wantProblem: true},
		"yes":         {annotations: map[string]string{AnnotationIgnore: "yes"}, wantProblem: true},
		"other key":   {annotations: map[string]string{"ignore": "true"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, problem := Ignored(tc.annotations)
			if got != tc.want || (problem != nil) != tc.wantProblem {
				t.Fatalf("Ignored = %v, %v; want %v, problem %v", got, problem, tc.want, tc.wantProblem)
			}
			if problem != nil && problem.Field != "annotation "+AnnotationIgnore {
				t.Errorf("problem field = %q", problem.Field)
			}
		})
	}
}
