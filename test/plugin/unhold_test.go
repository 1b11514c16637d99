package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// Uninstalling configstamp mid-canary (issue "The canary at every edge":
// nothing it writes in a spec outlives its reason): a Deployment of three
// replicas is its change's canary, held at one new pod for a long window,
// when configstamp stops (its Deployment deleted). `kubectl configstamp
// unhold`, the documented step after it, puts back what configstamp set —
// the Deployment's spec is as applied again — and says which fields; run
// again, it finds nothing to do.
func TestUnholdForUninstalling(t *testing.T) {
	ns := namespace(t, "plugin-unhold")
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	d := framework.Deployment(ns, "held", framework.OptIn, spec)
	d.Spec.Replicas = ptr.To[int32](3)
	d.Annotations = map[string]string{rollout.AnnotationVerifyWindow: "5m"}
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "1"}, nil), d)
	waitRolledOut(t, d)
	applied := &appsv1.Deployment{}
	applied.Namespace, applied.Name = ns, d.Name
	env.Get(t, applied)

	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, d)
		return d.Annotations[rollout.AnnotationHold] != "" && d.Spec.MinReadySeconds != applied.Spec.MinReadySeconds,
			fmt.Sprintf("hold %q, minReadySeconds %d: want the canary held", d.Annotations[rollout.AnnotationHold], d.Spec.MinReadySeconds)
	})
	env.Configstamp.Stop() // uninstalled
	t.Cleanup(func() {
		if err := env.Configstamp.Start(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("starting configstamp again: %v", err)
		}
	})

	out, errOut, code := run(t, "unhold", "-n", ns)
	t.Logf("kubectl configstamp unhold -n %s: exit %d\n%s%s", ns, code, out, errOut)
	if code != 0 {
		t.Fatalf("unhold exited %d", code)
	}
	if !strings.Contains(out, "deployment/held in "+ns+": put back spec.strategy.rollingUpdate.maxSurge, spec.strategy.rollingUpdate.maxUnavailable, spec.minReadySeconds") {
		t.Errorf("unhold's output does not name what it put back:\n%s", out)
	}
	env.Get(t, d)
	got := fmt.Sprint(d.Spec.MinReadySeconds, d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, d.Spec.Paused)
	want := fmt.Sprint(applied.Spec.MinReadySeconds, applied.Spec.Strategy.RollingUpdate.MaxSurge, applied.Spec.Strategy.RollingUpdate.MaxUnavailable, applied.Spec.Paused)
	if got != want || d.Annotations[rollout.AnnotationHold] != "" {
		t.Errorf("after unhold: minReadySeconds, maxSurge, maxUnavailable, paused %s, hold %q; want %s as applied, no hold", got, d.Annotations[rollout.AnnotationHold], want)
	}
	if out := ok(t, "unhold", "-n", ns); !strings.Contains(out, "nothing to put back") {
		t.Errorf("unhold a second time:\n%s", out)
	}
}
