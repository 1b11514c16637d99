package plugin

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// statusRings is what a test reads of status -o json's rings.
type statusRings struct {
	Rings []struct {
		Source string
		Rings  []struct {
			Ring                                  int
			Namespaces                            []string
			Rolling, Verifying, Completed, Halted int
			Canary                                string
		}
	}
}

// ringCounts are status's counts of source's group, by ring: rolling +
// verifying, completed, and the running canary; nil when it is not in flight.
func ringCounts(t *testing.T, source string) map[int][3]string {
	t.Helper()
	var st statusRings
	jsonOf(t, ok(t, "status", "-o", "json"), &st)
	for _, g := range st.Rings {
		if g.Source != source {
			continue
		}
		out := map[int][3]string{}
		for _, r := range g.Rings {
			out[r.Ring] = [3]string{fmt.Sprint(r.Rolling + r.Verifying), fmt.Sprint(r.Completed), r.Canary}
		}
		return out
	}
	return nil
}

// Issue 54: status shows a copied ConfigMap's rollout ring by ring, on the
// cluster: ring 0's workload as the change's running canary while ring 1's
// waits; then ring 1 rolling, with no canary of its own, once ring 0
// completed; then nothing in flight.
func TestStatusRingByRingOnTheCluster(t *testing.T) {
	const source = "ConfigMap/ring-shared"
	base := env.Namespace(t, "plugin-ring0", map[string]string{rollout.LabelRing: "0"})
	tenant := env.Namespace(t, "plugin-ring1", map[string]string{rollout.LabelRing: "1"})
	app := func(ns string) *appsv1.Deployment {
		spec := framework.PodSpec()
		framework.MountConfigMap(&spec, "ring-shared")
		d := framework.Deployment(ns, "app", framework.OptIn, spec)
		d.Spec.Replicas = ptr.To[int32](2)
		d.Annotations = map[string]string{rollout.AnnotationVerifyWindow: "10s"}
		return d
	}
	copyOf := func(ns, v string) *corev1.ConfigMap {
		return framework.ConfigMap(ns, "ring-shared", map[string]string{"a": v}, nil)
	}
	a, b := app(base), app(tenant)
	env.Apply(t, copyOf(base, "1"), copyOf(tenant, "1"), a, b)
	waitRolledOut(t, a, b)

	env.Apply(t, copyOf(base, "2"), copyOf(tenant, "2"))
	canary := base + "/deployment/app"
	framework.Eventually(t, time.Minute, func() (bool, string) {
		c := ringCounts(t, source)
		if c[1][0] != "" && c[1][0] != "0" {
			t.Fatalf("status %v: ring 1 rolls while ring 0's canary has not passed", c)
		}
		return c[0][2] == canary, fmt.Sprintf("status by ring %v: want ring 0's running canary %s", c, canary)
	})
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		c := ringCounts(t, source)
		if c[1][2] != "" {
			t.Fatalf("status %v: ring 1 runs a canary of its own", c)
		}
		return c[0][1] == "1" && c[1][0] == "1", fmt.Sprintf("status by ring %v: want ring 0 completed and ring 1 rolling", c)
	})
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		c := ringCounts(t, source)
		return c == nil, fmt.Sprintf("status by ring %v: want nothing in flight", c)
	})
}
