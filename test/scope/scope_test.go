package scope

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// workloadResources are what configstamp caches per namespace.
var cachedResources = []string{"configmaps", "secrets", "deployments", "statefulsets", "daemonsets"}

func changeConfig(t *testing.T, ns, value string) {
	t.Helper()
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": value}, nil))
}

// untouched fails unless configstamp never wrote to dep: no stamp, none of its
// annotations, the template as created, one ReplicaSet.
func untouched(t *testing.T, dep *appsv1.Deployment, template string) {
	t.Helper()
	got := dep.DeepCopy()
	env.Get(t, got)
	if h := framework.TemplateHash(got); h != "" {
		t.Errorf("%s/%s out of scope is stamped: %q", got.Namespace, got.Name, h)
	}
	for k := range got.Annotations {
		if strings.HasPrefix(k, "configstamp.io/") {
			t.Errorf("%s/%s out of scope carries %s", got.Namespace, got.Name, k)
		}
	}
	if framework.TemplateJSON(t, got) != template {
		t.Errorf("%s/%s out of scope: template changed", got.Namespace, got.Name)
	}
	if n := len(env.ReplicaSets(t, got.Namespace, got.Name)); n > 1 {
		t.Errorf("%s/%s out of scope rolled: %d ReplicaSets", got.Namespace, got.Name, n)
	}
}

// webhookSelector returns the namespaceSelector requirements of the first
// webhook of the named configuration.
func webhookSelector(t *testing.T, name string) string {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	mwc.Name = name
	env.Get(t, mwc)
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), mwc) })
	var out []string
	for _, r := range mwc.Webhooks[0].NamespaceSelector.MatchExpressions {
		out = append(out, r.Key+" "+string(r.Operator)+" "+strings.Join(r.Values, ","))
	}
	return strings.Join(out, "; ")
}

// TestWatchNamespaces: with --watch-namespaces=scope-a,scope-b a workload in
// scope-c is neither stamped (webhook) nor rolled (reconciler), and configstamp
// lists and watches ConfigMaps, Secrets and workloads only in scope-a and
// scope-b (and the hash key Secret, by name, in its own namespace): never
// cluster-wide.
func TestWatchNamespaces(t *testing.T) {
	for _, ns := range []string{"scope-a", "scope-b", "scope-c"} {
		namespace(t, ns, nil)
	}
	since := time.Now()
	p := startConfigstamp(t, "watch", "--watch-namespaces=scope-a,scope-b",
		"--webhook-config-name=configstamp-watch", "--leader-election-id=configstamp-watch")
	sel := webhookSelector(t, "configstamp-watch")
	t.Logf("webhook namespaceSelector: %s", sel)
	if !strings.Contains(sel, "kubernetes.io/metadata.name In scope-a,scope-b") {
		t.Errorf("the webhook's namespaceSelector does not name the watched namespaces: %s", sel)
	}

	a, b, c := env.App(t, "scope-a"), env.App(t, "scope-b"), env.App(t, "scope-c")
	for _, d := range []*appsv1.Deployment{a, b} {
		if h := framework.TemplateHash(d); !strings.HasPrefix(h, "v1-") {
			t.Fatalf("%s not stamped at CREATE: %q", d.Namespace, h)
		}
	}
	cTemplate := framework.TemplateJSON(t, c)
	if h := framework.TemplateHash(c); h != "" {
		t.Fatalf("scope-c stamped at CREATE: %q", h)
	}

	before := p.ReconcileCounts(t)
	changeConfig(t, "scope-c", "2") // first: by the time a and b rolled, c's change was long seen, if at all
	changeConfig(t, "scope-a", "2")
	changeConfig(t, "scope-b", "2")
	for _, d := range []*appsv1.Deployment{a, b} {
		env.WaitTemplateHash(t, d.DeepCopy(), framework.TemplateHash(d))
		framework.Eventually(t, 60*time.Second, func() (bool, string) {
			n := len(env.ReplicaSets(t, d.Namespace, d.Name))
			return n == 2, fmt.Sprintf("%d ReplicaSets", n)
		})
	}
	p.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	untouched(t, c, cTemplate)

	reads := configstampReads(t, since, cachedResources...)
	counts := byNamespace(reads)
	t.Logf("configstamp's list/watch requests by verb, resource and namespace: %v", counts)
	for _, ev := range reads {
		ns := ev.ObjectRef.Namespace
		switch {
		case ns == "scope-a" || ns == "scope-b":
		case ns == framework.OwnNamespace && ev.ObjectRef.Resource == "secrets" && strings.Contains(ev.RequestURI, "fieldSelector="):
			// the hash key Secret, by name (hashkey.Watcher)
		default:
			t.Errorf("%s %s in namespace %q: %s", ev.Verb, ev.ObjectRef.Resource, ns, ev.RequestURI)
		}
	}
	for _, r := range []string{"configmaps", "secrets", "deployments"} {
		for _, ns := range []string{"scope-a", "scope-b"} {
			// client-go informers list through a watch (sendInitialEvents), or list then watch.
			if counts["watch "+r+" "+ns] == 0 {
				t.Errorf("no watch of %s in %s: %v", r, ns, counts)
			}
		}
	}
}

// TestExcludeNamespaces: with --exclude-namespaces=scope-x and
// --namespace-selector=tier!=off, workloads in scope-x and in a namespace
// labelled tier=off are neither stamped at CREATE (the webhook's
// namespaceSelector and handler) nor rolled (the reconciler); ConfigMaps and
// Secrets are listed and watched cluster-wide only with a field selector that
// leaves out scope-x, configstamp's own namespace and kube-system. Labelling
// the namespace into the selector brings its workload in (a baseline record,
// no rollout).
func TestExcludeNamespaces(t *testing.T) {
	namespace(t, "scope-x", nil)
	namespace(t, "scope-y", nil)
	namespace(t, "scope-z", map[string]string{"tier": "off"})
	since := time.Now()
	p := startConfigstamp(t, "exclude", "--exclude-namespaces=scope-x", "--namespace-selector=tier!=off",
		"--webhook-config-name=configstamp-exclude", "--leader-election-id=configstamp-exclude")
	sel := webhookSelector(t, "configstamp-exclude")
	t.Logf("webhook namespaceSelector: %s", sel)
	if !strings.Contains(sel, "kubernetes.io/metadata.name NotIn configstamp-system,kube-system,scope-x") || !strings.Contains(sel, "tier NotIn off") {
		t.Errorf("the webhook's namespaceSelector misses the exclusions or the label selector: %s", sel)
	}

	x, y, z := env.App(t, "scope-x"), env.App(t, "scope-y"), env.App(t, "scope-z")
	if h := framework.TemplateHash(y); !strings.HasPrefix(h, "v1-") {
		t.Fatalf("scope-y not stamped at CREATE: %q", h)
	}
	xTemplate, zTemplate := framework.TemplateJSON(t, x), framework.TemplateJSON(t, z)
	if framework.TemplateHash(x) != "" || framework.TemplateHash(z) != "" {
		t.Fatal("a workload out of scope was stamped at CREATE")
	}

	before := p.ReconcileCounts(t)
	changeConfig(t, "scope-x", "2")
	changeConfig(t, "scope-z", "2")
	changeConfig(t, "scope-y", "2")
	env.WaitTemplateHash(t, y.DeepCopy(), framework.TemplateHash(y))
	p.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	untouched(t, x, xTemplate)
	untouched(t, z, zTemplate)

	reads := configstampReads(t, since, cachedResources...)
	t.Logf("configstamp's list/watch requests by verb, resource and namespace: %v", byNamespace(reads))
	clusterWide := 0
	for _, ev := range reads {
		if ev.ObjectRef.Namespace != "" {
			if ev.ObjectRef.Namespace != framework.OwnNamespace || ev.ObjectRef.Resource != "secrets" {
				t.Errorf("%s %s in namespace %s: %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.RequestURI)
			}
			continue
		}
		clusterWide++
		u, err := url.ParseRequestURI(ev.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		fs := strings.Split(u.Query().Get("fieldSelector"), ",")
		for _, want := range []string{"metadata.namespace!=scope-x", "metadata.namespace!=kube-system", "metadata.namespace!=" + framework.OwnNamespace} {
			if !slices.Contains(fs, want) {
				t.Errorf("cluster-wide %s %s without %s: %s", ev.Verb, ev.ObjectRef.Resource, want, ev.RequestURI)
			}
		}
	}
	if clusterWide == 0 {
		t.Error("no cluster-wide list or watch: the audit log was not read")
	}

	// Into the selector: the reconciler records a baseline, rolls nothing.
	ns := &corev1.Namespace{}
	ns.Name = "scope-z"
	env.Get(t, ns)
	ns.Labels["tier"] = "on"
	if err := env.Client.Update(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	got := z.DeepCopy()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, got)
		return got.Annotations[stamp.AnnotationAppliedHash] != "", "no baseline record yet"
	})
	if framework.TemplateJSON(t, got) != zTemplate {
		t.Error("the workload of a namespace labelled into scope rolled")
	}
}
