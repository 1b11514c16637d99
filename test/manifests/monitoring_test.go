package manifests

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestMonitoringComponent: config/components/monitoring adds to config/default
// and config/selfsigned exactly what uncommenting ../prometheus does (the
// metrics Service, the ServiceMonitor and the PrometheusRule), named and
// labelled like the rest of the installation; every alert has a runbook_url
// (test/docs checks where it points).
func TestMonitoringComponent(t *testing.T) {
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			got := withComponent(t, "../components/monitoring", tc.dir)
			want := kustomize(t, enableComponent(t, tc.dir, "prometheus"))
			key := func(r *rendered) map[string]string {
				m := map[string]string{}
				for _, o := range r.objs {
					data, err := o.MarshalJSON()
					if err != nil {
						t.Fatal(err)
					}
					m[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = string(data)
				}
				return m
			}
			g, w := key(got), key(want)
			for k, v := range w {
				if g[k] != v {
					t.Errorf("%s: the component renders it differently from ../prometheus, or not at all", k)
				}
			}
			for k := range g {
				if _, ok := w[k]; !ok {
					t.Errorf("%s: rendered by the component, not by ../prometheus", k)
				}
			}
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
				if n := got.counts()[kind]; n != 1 {
					t.Errorf("%d %s objects, want 1", n, kind)
				}
			}
			rule := got.get(t, "PrometheusRule", "configstamp-alerts")
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			alerts := 0
			for _, g := range groups {
				rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, r := range rules {
					r := r.(map[string]any)
					if r["alert"] == nil {
						continue
					}
					alerts++
					ann, _ := r["annotations"].(map[string]any)
					if u, _ := ann["runbook_url"].(string); !strings.HasPrefix(u, "https://github.com/configstamp/configstamp/blob/main/docs/operations.md#") {
						t.Errorf("alert %v: runbook_url %q, want a section of docs/operations.md", r["alert"], u)
					}
				}
			}
			if alerts == 0 {
				t.Error("the PrometheusRule has no alert")
			}
		})
	}
}
