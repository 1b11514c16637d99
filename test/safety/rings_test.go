package safety

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// ringBaseNamespace is ring 0 of TestRingsJudgeACopiedChangeOnce: its pods
// of tenant-cfg v=stuck never become Ready (stuckHashIn, held by kwok).
const ringBaseNamespace = "ring-base"

// A platform copies one ConfigMap into three namespaces: ring-base in ring 0,
// ring-guess and ring-other in ring 1, two Deployments of three replicas in
// each. One bad value reaches every copy at once: ring-guess's tenant (with
// namespace `edit` rights only) writes into its own copy the very value ring
// 0 gets (a guess that is right), ring-other's copy gets another. Ring 0's
// canary fails: one pod in the cluster ran the bad value, and neither
// namespace of ring 1 is stamped, both told the same (the change of
// ConfigMap/tenant-cfg is halted), so the tenant cannot tell its guess was
// right. The tenant cannot move its namespace into ring 0. The fix then rolls
// ring 0 first, judged by its canary, and ring 1 after it with no canary of
// its own.
func TestRingsJudgeACopiedChangeOnce(t *testing.T) {
	t.Parallel()
	// A short window keeps ring 0's whole rollout (its canary's window, then
	// its second workload's verification) well within what ring 1 waits at
	// most (ringWaitFor: the 30 s deadline, the window and a minute).
	l := lane(t, "--verify-window=10s")
	base := l.NamespaceNamed(t, ringBaseNamespace, map[string]string{rollout.LabelRing: "0"})
	guess := l.NamespaceNamed(t, "ring-guess", map[string]string{rollout.LabelRing: "1"})
	other := l.NamespaceNamed(t, "ring-other", map[string]string{rollout.LabelRing: "1"})
	tenant := env.Tenant(t, guess)
	if _, stderr, err := framework.KubectlAs(tenant, "", "label", "namespace", guess, rollout.LabelRing+"=0", "--overwrite"); err == nil || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("the tenant relabelled its namespace's ring (%v, %s): want it forbidden", err, stderr)
	}
	namespaces := []string{base, guess, other}
	apps := map[string][]*appsv1.Deployment{}
	for _, ns := range namespaces {
		apps[ns] = []*appsv1.Deployment{tenantApp(ns, "app-a"), tenantApp(ns, "app-b")}
		env.Apply(t, copyOf(ns, "ok"), apps[ns][0], apps[ns][1])
	}
	initial := map[string]string{}
	for _, ns := range namespaces {
		waitComplete(t, ns, "app-a", "app-b")
		for _, d := range apps[ns] {
			initial[ns+"/"+d.Name] = framework.TemplateHash(get(t, d))
		}
	}

	// The bad value, the tenant's copy first.
	framework.MustKubectlAs(t, tenant, framework.Manifest(t, copyOf(guess, "stuck")), "apply", "-f", "-")
	env.Apply(t, copyOf(base, "stuck"), copyOf(other, "stuck-too"))
	bad, ran := stuckHashIn(base), map[string]bool{}
	ringOneUnstamped := func() {
		for _, ns := range []string{guess, other} {
			for _, d := range apps[ns] {
				if h := framework.TemplateHash(get(t, d)); h != initial[ns+"/"+d.Name] {
					t.Fatalf("%s/%s of ring 1 was stamped (%s, record %+v) while ring 0's canary judged the change", ns, d.Name, h, state(t, d))
				}
			}
		}
	}
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		ringOneUnstamped()
		ranBad(t, base, bad, ran, "app-a", "app-b")
		a, b := state(t, apps[base][0]), state(t, apps[base][1])
		return a.State == rollout.Failed || b.State == rollout.Failed, fmt.Sprintf("ring 0: %+v, %+v", a, b)
	})
	for _, ns := range []string{guess, other} {
		for _, d := range apps[ns] {
			env.WaitEvent(t, d, "RolloutHalted", "ConfigMap/tenant-cfg")
		}
	}
	// Past the halted workloads' own recheck (haltedRecheck), the debounce
	// and the ring settle, all counted from before the events: still held.
	watched := time.Now()
	framework.Eventually(t, haltedRecheck+time.Minute, func() (bool, string) {
		ringOneUnstamped()
		return time.Since(watched) > haltedRecheck+5*time.Second, "watching ring 1 past the halted workloads' recheck"
	})
	ranBad(t, base, bad, ran, "app-a", "app-b")
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the bad value (%v), want 1: ring 0's canary's", len(ran), ran)
	}

	// The fix, everywhere.
	framework.MustKubectlAs(t, tenant, framework.Manifest(t, copyOf(guess, "fixed")), "apply", "-f", "-")
	env.Apply(t, copyOf(base, "fixed"), copyOf(other, "fixed"))
	records := map[string]rollout.Record{}
	framework.Eventually(t, 4*time.Minute, func() (bool, string) {
		for _, ns := range namespaces {
			for _, d := range apps[ns] {
				r := state(t, d)
				if r.State != rollout.Completed || r.Verified != framework.TemplateHash(get(t, d)) || framework.TemplateHash(d) == initial[ns+"/"+d.Name] {
					return false, fmt.Sprintf("%s/%s: %+v", ns, d.Name, r)
				}
				records[ns+"/"+d.Name] = r
			}
		}
		return true, ""
	})
	var ringZeroLast time.Time
	canaries := 0
	for _, d := range apps[base] {
		r := records[base+"/"+d.Name]
		if r.Canary != rollout.NoCanary {
			canaries++
		}
		if r.Started.After(ringZeroLast) {
			ringZeroLast = r.Started
		}
	}
	if canaries != 1 {
		t.Errorf("ring 0 had %d canaries of the fix, want 1", canaries)
	}
	for _, ns := range []string{guess, other} {
		for _, d := range apps[ns] {
			r := records[ns+"/"+d.Name]
			if r.Canary != rollout.NoCanary || r.Started.Before(ringZeroLast) {
				t.Errorf("%s/%s of ring 1: %+v; want it started after ring 0's last (%v), with no canary of its own", ns, d.Name, r, ringZeroLast)
			}
		}
	}
	// How far each change got, ring by ring.
	for _, want := range []struct {
		ring, result string
		n            float64
	}{{"0", "failed", 1}, {"0", "completed", 2}, {"1", "completed", 4}, {"1", "failed", 0}} {
		got, err := l.Metrics("configstamp_ring_rollouts_total", `ring="`+want.ring+`"`, `result="`+want.result+`"`)
		if err != nil || got != want.n {
			t.Errorf("configstamp_ring_rollouts_total{ring=%q,result=%q} = %v (%v), want %v", want.ring, want.result, got, err, want.n)
		}
	}
}

// copyOf is ns's copy of the platform's ConfigMap, tenant-cfg v=v.
func copyOf(ns, v string) *corev1.ConfigMap {
	return framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": v}, nil)
}
