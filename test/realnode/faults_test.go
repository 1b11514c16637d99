//go:build linux

package realnode_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/localcp"
)

// TestNoFalseHaltFromTheNode: a good change is judged through faults of
// the node that are not the config's, each inside the verification window
// (120 s here): a new pod evicted through the Eviction API, containerd
// killed and restarted, the kubelet killed and restarted, and the node
// stopped (cordoned, its kubelet gone until the node is NotReady).
// evicted (canary off) is verifying its whole rollout meanwhile; steady,
// two replicas at the defaults, is the change's canary, held at one new
// pod and judged through the same faults. Neither fails: evicted
// completes, steady's canary passes.
func TestNoFalseHaltFromTheNode(t *testing.T) {
	// Not parallel: the node's faults would be every other test's too.
	ns := lane(t, defaultFlags...).Namespace(t, "node-faults", nil)
	window := map[string]string{rollout.AnnotationVerifyWindow: "120s"}
	whole := map[string]string{rollout.AnnotationVerifyWindow: "120s", rollout.AnnotationCanaryOpt: "false"}
	evicted := deployment(ns, "evicted", "shared", appOptions{probe: true, annotations: whole})
	steady := deployment(ns, "steady", "shared", appOptions{probe: true, annotations: window})
	steady.Spec.Replicas = ptr.To(int32(2))
	env.Apply(t, configMap(ns, "shared", "good"), evicted, steady)
	waitReady(t, evicted, 2*time.Minute)
	waitReady(t, steady, 2*time.Minute)
	before := framework.TemplateHash(steady)
	env.Apply(t, configMap(ns, "shared", "better"))
	waitState(t, evicted, rollout.Verifying, time.Minute)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) { // its canary pod runs, held
		rec := record(t, steady)
		for _, p := range pods(t, ns, "steady") {
			if p.Annotations["configstamp.io/config-hash"] != before && containersReadyFor(p) > 0 {
				return rec.Canary == rollout.CanaryRunning && rec.Hold != "", fmt.Sprintf("steady's record %+v", rec)
			}
		}
		return false, fmt.Sprintf("steady's canary pod not Ready yet; record %+v", rec)
	})
	noFailure := func(what string) {
		t.Helper()
		for _, d := range []client.Object{evicted, steady} {
			if note := failedNote(t, d); note != "" {
				t.Fatalf("%s: %s's good rollout failed: %s", what, d.GetName(), note)
			}
		}
	}

	ps := pods(t, ns, "evicted")
	if len(ps) != 1 {
		t.Fatalf("evicted runs %d pods, want 1", len(ps))
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: ps[0].Name, Namespace: ns}}
	if err := env.Client.SubResource("eviction").Create(t.Context(), &ps[0], ev); err != nil {
		t.Fatalf("evicting %s: %v", ps[0].Name, err)
	}
	waitReady(t, evicted, time.Minute)
	noFailure("a pod evicted")
	t.Log("evicted a new pod; its replacement is Ready")

	if err := env.CP.RestartContainerd(); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, "containerd restarted")
	noFailure("containerd restarted")

	if err := env.CP.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, "kubelet restarted")
	noFailure("the kubelet restarted")

	env.Kubectl(t, "", "cordon", localcp.RealNodeName)
	if err := env.CP.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() {
		_ = env.CP.StartKubelet() // an error: it runs already
		env.Kubectl(t, "", "uncordon", localcp.RealNodeName)
	})
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		ready, why := nodeReady(t)
		return !ready, "the node is still Ready without its kubelet: " + why
	})
	t.Logf("the node turned NotReady %s after its kubelet stopped; steady's canary %s", since(stopped), record(t, steady).Canary)
	noFailure("the node NotReady")
	if err := env.CP.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "", "uncordon", localcp.RealNodeName)
	waitNodeReady(t, "kubelet started again")

	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		noFailure("after the faults")
		rec, canary := record(t, evicted), record(t, steady)
		return rec.State == rollout.Completed && canary.Canary == rollout.CanaryPassed,
			fmt.Sprintf("evicted's record %+v (want completed), steady's %+v (want its canary passed)", rec, canary)
	})
	if n := env.CountEvents(t, steady, controllers.ReasonRolloutFailed) + env.CountEvents(t, evicted, controllers.ReasonRolloutFailed); n != 0 {
		t.Fatalf("%d RolloutFailed events on a good change", n)
	}
}

// waitState polls until obj's record is in state.
func waitState(t *testing.T, obj client.Object, state rollout.State, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() (bool, string) {
		rec := record(t, obj)
		return rec.State == state, fmt.Sprintf("%s's record %+v, want %s", obj.GetName(), rec, state)
	})
}

// nodeReady reads the real node's Ready condition.
func nodeReady(t *testing.T) (bool, string) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: localcp.RealNodeName}, n); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return false, "no Ready condition"
}

func waitNodeReady(t *testing.T, after string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		ready, why := nodeReady(t)
		return ready, after + ": node not Ready: " + why
	})
}

// TestSlowRolloutThatProgressesDoesNotFail: a StatefulSet whose rolling
// update takes longer than --progress-deadline (eight pods, each Ready 15 s
// after it starts, one at a time: 8 × 18 s at least; one step took a loaded
// node over 60 s in make test, and over 90 s in .ci/run's) but progresses at
// each pod: the deadline counts from the last progress, so it completes
// without a failure.
func TestSlowRolloutThatProgressesDoesNotFail(t *testing.T) {
	const deadline = 2 * time.Minute
	t.Parallel()
	ns := lane(t, append(suiteFlags, "--progress-deadline="+deadline.String())...).Namespace(t, "slow", nil)
	spec := appSpec("shared", appOptions{probe: true})
	spec.Containers[0].ReadinessProbe.InitialDelaySeconds = 15
	// The test is about the deadline, not readiness: a probe answered late
	// on a loaded node (the suite's is 1 s, once) must not look like a pod
	// that lost its readiness.
	spec.Containers[0].ReadinessProbe.TimeoutSeconds = 5
	spec.Containers[0].ReadinessProbe.FailureThreshold = 3
	sts := framework.StatefulSet(ns, "slow", framework.OptIn, spec)
	sts.Spec.Replicas = ptr.To[int32](8)
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement // only the first start in parallel
	sts.Annotations = map[string]string{rollout.AnnotationVerifyWindow: "5s"}
	env.Apply(t, configMap(ns, "shared", "good"), sts)
	waitReady(t, sts, 3*time.Minute)
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "better"))
	framework.Eventually(t, 12*time.Minute, func() (bool, string) {
		if note := failedNote(t, sts); note != "" {
			t.Fatalf("the slow but progressing rollout failed %s after the change: %s", since(changed), note)
		}
		rec := record(t, sts)
		return rec.State == rollout.Completed, fmt.Sprintf("record %+v", rec)
	})
	took := time.Since(changed)
	t.Logf("the StatefulSet's rollout completed %s after the change (progress deadline %v)", took.Round(time.Second), deadline)
	if took < deadline+5*time.Second {
		t.Fatalf("the rollout took %s, not longer than the %v deadline: the test proves nothing", took.Round(time.Second), deadline)
	}
}
