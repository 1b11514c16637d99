package kinds

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// sample is one version of a workload as a watch delivered it.
type sample struct {
	rv   int64 // resourceVersion: one etcd revision for every kind, so versions of different kinds order
	name string
	gen  int64
	hash string
	// ended: the workload's controller reports the rollout of generation gen
	// over (the status a user reads: complete, or for a Rollout also failed).
	ended bool
}

// timeline records every version of the Rollouts and Deployments of a
// namespace from the moment it starts, to judge afterwards, in the order the
// API server wrote them, how many workloads were mid-rollout at once.
type timeline struct {
	mu      sync.Mutex
	samples []sample
	err     error
}

// watchTimeline starts watching the Rollouts and Deployments of ns; the watch
// ends with the test.
func watchTimeline(t *testing.T, ns string) *timeline {
	t.Helper()
	tl := &timeline{}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	rollouts := &unstructured.UnstructuredList{}
	rollouts.SetAPIVersion("argoproj.io/v1alpha1")
	rollouts.SetKind("RolloutList")
	for _, list := range []client.ObjectList{rollouts, &appsv1.DeploymentList{}} {
		w, err := wc.Watch(t.Context(), list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				if obj, ok := ev.Object.(client.Object); ok {
					tl.observe(obj)
				}
			}
		}()
	}
	return tl
}

func (tl *timeline) observe(obj client.Object) {
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	s := sample{rv: rv, name: obj.GetName(), gen: obj.GetGeneration(), hash: framework.TemplateHash(obj)}
	switch w := obj.(type) {
	case *appsv1.Deployment:
		s.ended = framework.RolledOut(w)
	case *unstructured.Unstructured:
		observed, _, _ := unstructured.NestedString(w.Object, "status", "observedGeneration")
		phase, _, _ := unstructured.NestedString(w.Object, "status", "phase")
		s.ended = observed == strconv.FormatInt(w.GetGeneration(), 10) && slices.Contains([]string{"Healthy", "Degraded"}, phase)
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if err != nil && tl.err == nil {
		tl.err = fmt.Errorf("%s: resourceVersion %q is no integer", obj.GetName(), obj.GetResourceVersion())
	}
	tl.samples = append(tl.samples, s)
}

// seen reports whether the watch has delivered a version of name stamped hash.
func (tl *timeline) seen(name, hash string) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.ContainsFunc(tl.samples, func(s sample) bool { return s.name == name && s.hash == hash })
}

// waveSummary is what a timeline says about one wave.
type waveSummary struct {
	// order is the workloads in the order their template was first stamped
	// with a new hash.
	order []string
	// peak is the most workloads mid-rollout at once: from the version whose
	// template first carries the new hash until the version whose status
	// reports that generation's rollout over.
	peak int
	// stamps is, per workload, how many distinct template stamps it had.
	stamps map[string]int
}

// summary replays the samples in resourceVersion order.
func (tl *timeline) summary(t *testing.T) waveSummary {
	t.Helper()
	tl.mu.Lock()
	samples := slices.Clone(tl.samples)
	err := tl.err
	tl.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(samples, func(a, b sample) int { return cmp.Compare(a.rv, b.rv) })
	initial := map[string]string{}
	since := map[string]int64{} // name -> generation that carried the new hash first
	over := map[string]bool{}
	distinct := map[string]map[string]bool{}
	out := waveSummary{stamps: map[string]int{}}
	for _, s := range samples {
		if distinct[s.name] == nil {
			distinct[s.name] = map[string]bool{}
			initial[s.name] = s.hash
		}
		distinct[s.name][s.hash] = true
		if s.hash == initial[s.name] || over[s.name] {
			continue
		}
		if _, ok := since[s.name]; !ok {
			since[s.name] = s.gen
			out.order = append(out.order, s.name)
		}
		if s.ended && s.gen >= since[s.name] {
			over[s.name] = true
		}
		out.peak = max(out.peak, len(since)-len(over))
	}
	for name, hashes := range distinct {
		out.stamps[name] = len(hashes)
	}
	return out
}
