// The observability tests check what config/prometheus and config/grafana
// ship for operators: the PrometheusRule parses with Prometheus's own rule parser
// (model/rulefmt: PromQL and alert templates), and every metric a rule or a
// dashboard panel uses is one configstamp exports — read from the /metrics of
// the real binary running against a local control plane — or one of the few
// external series the alerts rely on on purpose (the API server's admission
// webhook metrics, Prometheus's up).

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/test/framework"
)

// external are the metrics the rules and the dashboard may use without
// configstamp exporting them: the API server's view of the admission webhook
// (only it sees a call that failed open or timed out), and Prometheus's up.
func external(name string) bool {
	return name == "up" || strings.HasPrefix(name, "apiserver_admission_webhook_")
}

// job is the job label the ServiceMonitor gives configstamp's series.
const job = "configstamp-metrics-service"

// exercise once gives configstamp work, so that the families that have no
// series before their first observation (webhook latency, work queues) are
// there: an opted-in Deployment mounting a ConfigMap (one admission), then a
// change of the ConfigMap (a reconcile that stamps it again).
var exercise sync.Once

// exported scrapes the running configstamp and returns every sample name it
// exposes (histograms and summaries with their _bucket, _sum, _count series),
// once the families of the webhook and the reconcilers are there.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	exercise.Do(func() {
		ns := env.Namespace(t, "observability", nil)
		spec := framework.PodSpec()
		framework.MountConfigMap(&spec, "app-config")
		cm := framework.ConfigMap(ns, "app-config", map[string]string{"k": "1"}, nil)
		dep := framework.Deployment(ns, "app", framework.OptIn, spec)
		env.Apply(t, cm, dep)
		first := env.WaitTemplateHash(t, dep, "")
		cm.Data["k"] = "2"
		env.Apply(t, cm)
		env.WaitTemplateHash(t, dep, first)
	})
	var names map[string]bool
	framework.Eventually(t, time.Minute, func() (bool, string) {
		families, err := scrape(env.Configstamp.MetricsURL())
		if err != nil {
			return false, err.Error()
		}
		names = map[string]bool{}
		for name, f := range families {
			names[name] = true
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				names[name+"_sum"], names[name+"_count"] = true, true
			}
		}
		var missing []string
		for _, n := range []string{"controller_runtime_reconcile_total", "workqueue_depth", "controller_runtime_webhook_latency_seconds"} {
			if !names[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, fmt.Sprintf("waiting for %v among the %d names exported", missing, len(names))
	})
	return names
}

func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// metricNames returns the metric names an expression selects, from the
// parsed syntax tree (vector and matrix selectors).
func metricNames(t *testing.T, expr string) ([]string, error) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%q selects no metric by name", expr)
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// checkNames fails for every name that configstamp does not export and that
// is not an allowed external one; configstamp's own series must be selected
// by the job the ServiceMonitor gives them.
func checkNames(t *testing.T, where, expr string, have map[string]bool) {
	t.Helper()
	names, err := metricNames(t, expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	if len(names) == 0 {
		t.Errorf("%s: %q uses no metric", where, expr)
	}
	for _, n := range names {
		if !have[n] && !external(n) {
			t.Errorf("%s uses %s: configstamp does not export it and it is no allowed external metric", where, n)
		}
	}
	if !strings.Contains(expr, `job="`+job+`"`) && !slices.ContainsFunc(names, external) {
		t.Errorf("%s: %q does not select configstamp's job=%q", where, expr, job)
	}
}

func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.Root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestPrometheusRule: config/prometheus ships one PrometheusRule; its groups
// are a valid Prometheus rules file (rulefmt: strict fields, PromQL, alert
// templates); every alert has a severity and a summary; and it alerts on what
// the issue asks for.
func TestPrometheusRule(t *testing.T) {
	have := exported(t)
	out, err := exec(t, "kubectl", "kustomize", filepath.Join(env.Root, "config", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() == "PrometheusRule" {
			rules = append(rules, u)
		}
	}
	if len(rules) != 1 || rules[0].GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Fatalf("config/prometheus renders %d PrometheusRules (want 1, monitoring.coreos.com/v1)", len(rules))
	}
	spec, err := yaml.Marshal(rules[0].Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (%q)", g.Name, r.Expr)
				continue
			}
			alerts = append(alerts, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a summary or a description", r.Alert)
			}
			checkNames(t, "alert "+r.Alert, r.Expr, have)
		}
	}
	slices.Sort(alerts)
	want := []string{"ConfigstampChangeHalted", "ConfigstampDown", "ConfigstampReconcileErrors", "ConfigstampReplicaDown",
		"ConfigstampRolloutFailed", "ConfigstampRolloutFailedVerification", "ConfigstampRolloutsWaiting", "ConfigstampWebhookErrors", "ConfigstampWebhookFailingOpen",
		"ConfigstampWebhookSlow"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// TestDashboard: config/grafana/dashboard.json is a dashboard whose every
// query is valid PromQL (Grafana's $__rate_interval replaced by a duration;
// no other variable) over metrics configstamp exports or the allowed external
// ones, from the Prometheus data source chosen by the $datasource variable;
// panel ids are unique and every panel has a place.
func TestDashboard(t *testing.T) {
	have := exported(t)
	var d dashboard
	if err := json.Unmarshal(repoFile(t, "config/grafana/dashboard.json"), &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	if len(d.Templating.List) != 1 || d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("templating %+v: want one variable, datasource, of Prometheus data sources", d.Templating.List)
	}
	ids := map[int]bool{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %q has no gridPos", p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q datasource %+v: want prometheus ${datasource}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				expr := strings.ReplaceAll(q.Expr, "$__rate_interval", "5m")
				if strings.Contains(expr, "$") {
					t.Errorf("panel %q: %q uses a variable the dashboard does not define", p.Title, q.Expr)
					continue
				}
				checkNames(t, "panel "+p.Title+" "+q.RefID, expr, have)
			}
		}
	}
	walk(d.Panels)
	t.Logf("%d panels, %d queries", len(ids), queries)
}

// TestExtractor keeps metricNames honest: names come from selectors only,
// not from functions, labels or strings.
func TestExtractor(t *testing.T) {
	got, err := metricNames(t, `histogram_quantile(0.99, sum by (le) (rate(a_bucket{job="x", name="up"}[5m]))) / on() group_left b + absent(up == 1) + {__name__="c"}`)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"a_bucket", "b", "c", "up"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if _, err := metricNames(t, `rate(x[5m]`); err == nil {
		t.Error("an unbalanced expression parsed")
	}
}
