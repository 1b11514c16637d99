package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/test/framework"
)

// wave is the namespace of workloads every run changes: Deployments, two
// StatefulSets and a DaemonSet, each mounting the shared ConfigMap, the shared
// Secret through envFrom, and a ConfigMap of its own.
type wave struct {
	ns      string
	objs    []client.Object
	version int // of the shared ConfigMap
}

func workloadSpec(own string) corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	framework.MountConfigMap(&spec, own)
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	return spec
}

func newWave(t *testing.T, ns string, deployments int) *wave {
	t.Helper()
	env.Kubectl(t, "", "create", "namespace", ns)
	w := &wave{ns: ns}
	apply := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"v": "0"}, nil),
		framework.Secret(ns, "creds", map[string]string{"token": "t0"})}
	add := func(o client.Object) {
		w.objs = append(w.objs, o)
		apply = append(apply, framework.ConfigMap(ns, "own-"+o.GetName(), map[string]string{"v": "0"}, nil), o)
	}
	for i := range deployments {
		name := fmt.Sprintf("d-%02d", i)
		add(framework.Deployment(ns, name, framework.OptIn, workloadSpec("own-"+name)))
	}
	for i := range 2 {
		name := fmt.Sprintf("s-%d", i)
		add(framework.StatefulSet(ns, name, framework.OptIn, workloadSpec("own-"+name)))
	}
	add(framework.DaemonSet(ns, "ds-0", framework.OptIn, workloadSpec("own-ds-0")))
	env.Apply(t, apply...)
	w.waitComplete(t, w.objs, 3*time.Minute)
	return w
}

func key(o client.Object) string {
	kind := "Deployment"
	switch o.(type) {
	case *appsv1.StatefulSet:
		kind = "StatefulSet"
	case *appsv1.DaemonSet:
		kind = "DaemonSet"
	}
	return kind + "/" + o.GetName()
}

// made returns, per workload, the names of what its controller made for its
// templates: ReplicaSets of a Deployment, ControllerRevisions of a StatefulSet
// or DaemonSet. A rollout is a name that was not there before: counting names,
// not how many exist, stays right when revisionHistoryLimit prunes old ones.
func made(t *testing.T, ns string, objs []client.Object) map[string]map[string]bool {
	t.Helper()
	rs := &appsv1.ReplicaSetList{}
	crs := &appsv1.ControllerRevisionList{}
	if err := env.Client.List(t.Context(), rs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(t.Context(), crs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	owned := map[string]map[string]bool{}
	add := func(kind, owner, name string) {
		k := kind + "/" + owner
		if owned[k] == nil {
			owned[k] = map[string]bool{}
		}
		owned[k][name] = true
	}
	for _, r := range rs.Items {
		for _, o := range r.OwnerReferences {
			add(o.Kind, o.Name, r.Name)
		}
	}
	for _, r := range crs.Items {
		for _, o := range r.OwnerReferences {
			add(o.Kind, o.Name, r.Name)
		}
	}
	out := make(map[string]map[string]bool, len(objs))
	for _, o := range objs {
		out[key(o)] = owned[key(o)]
	}
	return out
}

// newNames counts the names in after that are not in before.
func newNames(before, after map[string]bool) int {
	n := 0
	for name := range after {
		if !before[name] {
			n++
		}
	}
	return n
}

// stamps reads the template stamp of every workload in objs, with one LIST
// per kind (a poll must be quicker than a wave).
func stamps(t *testing.T, objs []client.Object) map[string]string {
	t.Helper()
	all := map[string]string{}
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.StatefulSetList{}, &appsv1.DaemonSetList{}} {
		if err := env.Client.List(t.Context(), list, client.InNamespace(objs[0].GetNamespace())); err != nil {
			t.Fatal(err)
		}
		switch l := list.(type) {
		case *appsv1.DeploymentList:
			for i := range l.Items {
				all[key(&l.Items[i])] = framework.TemplateHash(&l.Items[i])
			}
		case *appsv1.StatefulSetList:
			for i := range l.Items {
				all[key(&l.Items[i])] = framework.TemplateHash(&l.Items[i])
			}
		case *appsv1.DaemonSetList:
			for i := range l.Items {
				all[key(&l.Items[i])] = framework.TemplateHash(&l.Items[i])
			}
		}
	}
	out := make(map[string]string, len(objs))
	for _, o := range objs {
		out[key(o)] = all[key(o)]
	}
	return out
}

// waitComplete waits until every workload's rollout is complete, as
// configstamp judges it (kubectl rollout status semantics).
func (w *wave) waitComplete(t *testing.T, objs []client.Object, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() (bool, string) {
		for _, o := range objs {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
				return false, err.Error()
			}
			kind, _ := workload.NewRegistry().Of(o)
			if done, _ := rollout.Complete(kind, o, rollout.Verification{}); !done {
				return false, key(o) + " not complete"
			}
		}
		return true, ""
	})
}

// run is one fault injected into one change of the wave.
type run struct {
	*wave
	fault fault
	index int
	sup   *supervisor
	// required rollouts per workload key; extra are workloads a fault adds
	// (counted for surprises) and removes again.
	required map[string]int
	extra    []client.Object
	state    map[string]any // what a fault keeps between inject and restore
}

func (r *run) do(t *testing.T) row {
	r.state = map[string]any{}
	r.required = map[string]int{}
	if r.fault.prepare != nil {
		r.fault.prepare(t, r)
	}
	before := made(t, r.ns, r.objs)
	oldStamps := stamps(t, r.objs)
	openBefore := env.WebhookFailOpen(t)
	began := time.Now()
	if r.fault.custom != nil {
		r.fault.custom(t, r)
	} else {
		r.changeShared(t)
		r.waitInFlight(t, oldStamps)
		r.fault.inject(t, r)
	}
	r.converge(t, oldStamps)
	converged := time.Since(began)
	leader(t).WaitIdle(t, map[string]float64{"deployment": 0})
	after := made(t, r.ns, r.objs)
	opened := env.WebhookFailOpen(t) - openBefore
	if opened < 0 { // kube-apiserver restarted: its counter started again from 0
		opened += openBefore
	}
	res := row{fault: r.fault.name, workloads: len(r.objs), converge: converged, failOpen: opened}
	for _, o := range r.objs {
		k := key(o)
		seen, want := newNames(before[k], after[k]), r.required[k]
		res.required += want
		res.seen += seen
		switch {
		case want > 0 && seen < want:
			res.lost += want - seen
			t.Errorf("%s: %d rollouts, %d required (lost)", k, seen, want)
		case want > 0 && seen > want:
			res.dup += seen - want
			t.Errorf("%s: %d rollouts, %d required (duplicate)", k, seen, want)
		case want == 0 && seen > 0:
			res.surpr += seen
			t.Errorf("%s: %d rollouts, none required (surprise)", k, seen)
		}
	}
	for _, o := range r.extra { // created during the run: one ReplicaSet each, no rollout
		if n := len(env.ReplicaSets(t, o.GetNamespace(), o.GetName())); n != 1 {
			res.surpr += n - 1
			t.Errorf("%s created during the run has %d ReplicaSets, want 1 (no rollout)", key(o), n)
		}
	}
	res.workloads += len(r.extra)
	if r.fault.restore != nil {
		r.fault.restore(t, r)
	}
	t.Logf("%s: %d workloads, %d rollouts required, %d seen, lost %d, duplicate %d, surprise %d, fail-open admissions %.0f, converged in %v",
		res.fault, res.workloads, res.required, res.seen, res.lost, res.dup, res.surpr, res.failOpen, converged.Round(100*time.Millisecond))
	return res
}

// changeShared changes the shared ConfigMap: every workload must roll once.
func (r *run) changeShared(t *testing.T) {
	t.Helper()
	r.version++
	env.Apply(t, framework.ConfigMap(r.ns, "shared", map[string]string{"v": strconv.Itoa(r.version)}, nil))
	for _, o := range r.objs {
		r.required[key(o)] = 1
	}
}

// waitInFlight waits until the wave is under way: some workloads stamped, not all.
func (r *run) waitInFlight(t *testing.T, old map[string]string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		now := stamps(t, r.objs)
		n := 0
		for k, h := range now {
			if h != old[k] {
				n++
			}
		}
		if n == len(r.objs) {
			t.Logf("the wave finished before the fault could be injected mid-wave")
			return true, ""
		}
		return n > 0, fmt.Sprintf("%d of %d stamped", n, len(r.objs))
	})
}

// converge waits until every workload that must roll carries a new stamp and
// every rollout is complete.
func (r *run) converge(t *testing.T, old map[string]string) {
	t.Helper()
	framework.Eventually(t, 5*time.Minute, func() (bool, string) {
		now := stamps(t, r.objs)
		var missing []string
		for k, want := range r.required {
			if want > 0 && now[k] == old[k] {
				missing = append(missing, k)
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, fmt.Sprintf("not stamped yet: %v", missing)
	})
	if stop, ok := r.state["stop"].(func() int); ok { // another writer: its part is the wave
		t.Logf("the other writer made %d updates during the wave", stop())
		stopWriter(t, r)
	}
	r.waitComplete(t, r.objs, 3*time.Minute)
}
