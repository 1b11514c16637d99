//go:build linux

package realnode_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestRingsOnTheNode is the run, at configstamp's defaults: eight
// namespaces each hold a copy of one ConfigMap and two Deployments of two
// replicas reading it at start; the first namespace is in ring 0, the other
// seven in ring 1. One `kubectl apply` gives all eight copies a value the
// container rejects: exactly one pod in the cluster ran it, one workload was
// stamped, and every other workload is told the change is halted. A good
// value then rolls ring 0, then ring 1, with no canary of its own; the time
// is printed beside ring 0's alone, what one namespace takes on its own.
func TestRingsOnTheNode(t *testing.T) {
	t.Parallel()
	l := lane(t, defaultFlags...)
	var namespaces []string
	for i := range 8 {
		ring := "1"
		if i == 0 {
			ring = "0"
		}
		namespaces = append(namespaces, l.Namespace(t, fmt.Sprintf("ring%s-%d", ring, i), map[string]string{rollout.LabelRing: ring}))
	}
	copies := func(value string) []client.Object {
		var out []client.Object
		for _, ns := range namespaces {
			out = append(out, configMap(ns, "shared", value))
		}
		return out
	}
	var all []*appsv1.Deployment
	objs := copies("good")
	for _, ns := range namespaces {
		for _, name := range []string{"a", "b"} {
			d := deployment(ns, name, "shared", appOptions{})
			d.Spec.Replicas = ptr.To(int32(2))
			all = append(all, d)
			objs = append(objs, d)
		}
	}
	env.Apply(t, objs...)
	before := map[string]string{}
	for _, d := range all {
		waitReady(t, d, 5*time.Minute)
		before[d.Namespace+"/"+d.Name] = framework.TemplateHash(d)
	}

	// The bad value, to every copy in one apply.
	ran := map[string]bool{}
	look := func() (stamped []string) {
		for _, d := range all {
			for _, p := range pods(t, d.Namespace, d.Name) {
				if h := p.Annotations[stamp.AnnotationHash]; h != "" && h != before[d.Namespace+"/"+d.Name] {
					ran[p.Namespace+"/"+p.Name] = true
				}
			}
			if env.Get(t, d); framework.TemplateHash(d) != before[d.Namespace+"/"+d.Name] {
				stamped = append(stamped, d.Namespace+"/"+d.Name)
			}
		}
		return stamped
	}
	canary := all[0]
	changed := time.Now()
	env.Apply(t, copies("bad")...)
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		if stamped := look(); len(stamped) > 1 || len(stamped) == 1 && stamped[0] != canary.Namespace+"/"+canary.Name {
			t.Fatalf("%v stamped %s after the bad change: want ring 0's canary alone", stamped, since(changed))
		}
		note := failedNote(t, canary)
		return note != "", fmt.Sprintf("no RolloutFailed on ring 0's canary yet; record %+v; pods that ran the bad value %v", record(t, canary), keys(ran))
	})
	t.Logf("ring 0's canary failed %s after the change", since(changed))
	for _, d := range all[1:] {
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			return event(t, d, rollout.ReasonRolloutHalted, changed) != "", "no RolloutHalted on " + d.Namespace + "/" + d.Name
		})
	}
	// Past the halted workloads' recheck (30 s), the debounce and a window.
	watched := time.Now()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		if stamped := look(); len(stamped) > 1 || len(ran) > 1 {
			t.Fatalf("stamped %v, pods that ran the bad value %v: want ring 0's canary and its one pod", stamped, keys(ran))
		}
		return time.Since(watched) > 65*time.Second, "watching the halt"
	})
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the bad value (%v), want exactly one", len(ran), keys(ran))
	}
	t.Logf("exactly one pod in the cluster ran the bad value (%v); the other 15 workloads in 8 namespaces were never stamped, all told it is halted", keys(ran))

	// A good value, ring by ring. Ring 0's namespace alone takes what each
	// namespace takes when it judges the change on its own (all of them side
	// by side, each with its canary): the per-namespace time.
	fixed := time.Now()
	env.Apply(t, copies("fixed")...)
	completed := func(d *appsv1.Deployment) {
		framework.Eventually(t, 6*time.Minute, func() (bool, string) {
			env.Get(t, d)
			rec := rollout.Read(d.GetAnnotations())
			return rec.State == rollout.Completed && !rec.Started.Before(fixed.Truncate(time.Second)), fmt.Sprintf("%s/%s: record %+v", d.Namespace, d.Name, rec)
		})
	}
	completed(all[0])
	completed(all[1])
	ringZero := since(fixed)
	for _, d := range all[2:] { // ring 1: after ring 0, judged by its canary
		completed(d)
		if rec := record(t, d); rec.Canary != rollout.NoCanary {
			t.Errorf("%s/%s of ring 1 had a canary of its own: %+v", d.Namespace, d.Name, rec)
		}
	}
	t.Logf("a good value rolled 16 workloads in 8 namespaces in %s ring by ring; ring 0 alone, the time of one namespace judging it on its own, took %s",
		since(fixed), ringZero)
}
