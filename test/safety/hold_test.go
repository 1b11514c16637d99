package safety

// A canary's hold against a cluster's admission policy.

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestRejectedHoldStillStamps: the cluster forbids changing a
// Deployment's rollout strategy (a ValidatingAdmissionPolicy, as a platform
// pins it with Kyverno or Gatekeeper), which a canary's hold sets (its
// surge and unavailable). configstamp, the canary on, still stamps the
// change: without the hold, with a HoldRejected event quoting the API
// server, and the strategy left as applied; the rollout completes. Before, every stamp write was rejected
// and retried, and nothing rolled.
func TestRejectedHoldStillStamps(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "policy", nil)
	name := "pin-strategy-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.strategy == oldObject.spec.strategy",
				Message:    "the rollout strategy is set by the platform",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), o) })
	}

	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	dep.Spec.Replicas = ptr.To[int32](3)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil), dep)
	got := dep.DeepCopy()
	h1 := env.WaitTemplateHash(t, got, "")
	// The policy is in force: the hold's fields cannot be changed.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		_, _, err := env.KubectlErr("", "-n", ns, "patch", "deployment", "app", "--type=merge", "-p", `{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1}}}}`)
		return err != nil, "the policy does not deny a change of the strategy yet"
	})

	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil))
	env.WaitTemplateHash(t, got, h1)
	env.WaitEvent(t, got, controllers.ReasonHoldRejected, "the rollout strategy is set by the platform")
	waitComplete(t, ns, "app")
	env.Get(t, got)
	if got.Spec.MinReadySeconds != 0 || got.Spec.Strategy.RollingUpdate == nil || got.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" {
		t.Fatalf("the spec after the rollout: minReadySeconds %d, strategy %+v; want them as applied (the hold was not written)", got.Spec.MinReadySeconds, got.Spec.Strategy)
	}
}

// TestOptingOutPutsBackTheHold: what configstamp sets in a spec for a
// canary never outlives its reason, and a workload that opts out ends it.
// Two Deployments of three replicas, each its change's canary: "frozen",
// whose canary's pod never becomes Ready, fails and is paused with its
// hold; "held", whose good change is held at one new pod for a long
// window. Each then opts out (`kubectl label ... configstamp.io/enabled-`):
// configstamp puts back at once what it set (pause, surge, unavailable,
// minReadySeconds), with a HoldReleased event; the failed one's halt stays.
// Before, both stayed held, the failed one paused for good.
func TestOptingOutPutsBackTheHold(t *testing.T) {
	t.Parallel()
	l := lane(t, "--verify-window=5m")
	frozenNS := l.NamespaceNamed(t, optOutNamespace, nil)
	heldNS := l.Namespace(t, "held", nil)
	apply := func(ns, name string) (*appsv1.Deployment, appsv1.DeploymentSpec) {
		d := framework.Deployment(ns, name, framework.OptIn, tenantSpec())
		d.Spec.Replicas = ptr.To[int32](3)
		env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), d)
		waitComplete(t, ns, name)
		return d, get(t, d).Spec // as applied, with the API server's defaults
	}
	frozen, frozenSpec := apply(frozenNS, "frozen")
	held, heldSpec := apply(heldNS, "held")

	env.Apply(t, framework.ConfigMap(frozenNS, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	env.Apply(t, framework.ConfigMap(heldNS, "tenant-cfg", map[string]string{"v": "good"}, nil))
	waitState(t, frozen, rollout.Failed)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		r := state(t, held)
		return r.Canary == rollout.CanaryRunning && r.Hold != "", fmt.Sprintf("held's record %+v: want a running canary, held", r)
	})
	if d := get(t, frozen); !d.Spec.Paused || d.Annotations[rollout.AnnotationHalted] == "" {
		t.Fatalf("the failed canary: paused %v, halted %q; want it paused by configstamp and halting its change", d.Spec.Paused, d.Annotations[rollout.AnnotationHalted])
	}

	for _, d := range []*appsv1.Deployment{frozen, held} {
		env.Kubectl(t, "", "label", "-n", d.Namespace, "deployment", d.Name, stamp.LabelEnabled+"-")
	}
	for _, c := range []struct {
		d    *appsv1.Deployment
		spec appsv1.DeploymentSpec
	}{{frozen, frozenSpec}, {held, heldSpec}} {
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			d := get(t, c.d)
			got := fmt.Sprint(d.Spec.Paused, d.Spec.MinReadySeconds, d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable)
			want := fmt.Sprint(c.spec.Paused, c.spec.MinReadySeconds, c.spec.Strategy.RollingUpdate.MaxSurge, c.spec.Strategy.RollingUpdate.MaxUnavailable)
			return got == want && d.Annotations[rollout.AnnotationHold] == "",
				fmt.Sprintf("%s opted out: paused, minReadySeconds, maxSurge, maxUnavailable %s, hold %q; want %s as applied", d.Name, got, d.Annotations[rollout.AnnotationHold], want)
		})
		env.WaitEvent(t, c.d, "HoldReleased", "no longer looks after this workload")
	}
	if d := get(t, frozen); d.Annotations[rollout.AnnotationHalted] == "" {
		t.Error("the failed canary's halt was lifted by its opt-out: its change would reach the others")
	}
}

// TestADaemonSetOnNoNodeIsNeverTheCanary: a DaemonSet whose node selector
// no node matches (a GPU agent on a cluster without GPUs) comes first in a
// wave (rollout-priority 10) beside a Deployment of three replicas; both
// read one ConfigMap. It can make no pod of a change, so it is not the
// canary: the Deployment is, at once, and the DaemonSet is stamped once
// that passed, its record idle. Before, the DaemonSet was the canary and
// passed on no pod (its record completed and verified, here at once, the
// lane's window being 0s): the change reached the Deployment untried.
func TestADaemonSetOnNoNodeIsNeverTheCanary(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "nonode", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	agentSpec := *spec.DeepCopy()
	agentSpec.NodeSelector = map[string]string{"example.com/gpu": "present"} // no node has it
	agent := framework.DaemonSet(ns, "gpu-agent", framework.OptIn, agentSpec)
	agent.Annotations = map[string]string{rollout.AnnotationPriority: "10"}
	app := framework.Deployment(ns, "app", framework.OptIn, spec)
	app.Spec.Replicas = ptr.To[int32](3)
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "1"}, nil), agent, app)
	waitComplete(t, ns, app.Name)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		a := get(t, agent)
		return a.Status.ObservedGeneration >= a.Generation, "the DaemonSet not observed yet"
	})
	before := framework.TemplateHash(get(t, app))

	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "2"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return framework.TemplateHash(get(t, app)) != before, "app not stamped"
	})
	stamped := time.Since(changed)
	if r := state(t, app); r.Canary == rollout.NoCanary { // running, or passed already (the lane's window is 0s)
		t.Errorf("app's record %+v: want it the change's canary", r)
	}
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := state(t, agent)
		return r.State == rollout.Idle && r.Canary == rollout.NoCanary, fmt.Sprintf("the DaemonSet's record %+v: want idle, no canary", r)
	})
	t.Logf("app, the canary, stamped %v after the change; the DaemonSet on no node stamped after it, idle", stamped.Round(time.Millisecond))
	if stamped > 20*time.Second {
		t.Errorf("app was stamped %v after the change: it waited for the DaemonSet on no node", stamped.Round(time.Millisecond))
	}
}

// TestTheCheapestCanaryGoesFirst: two Deployments of three replicas share a
// ConfigMap, a (first by name) with the Recreate strategy, whose canary
// would replace all three pods at once, and b, which a hold keeps at one
// new pod. A bad change (kwok keeps its pods unready): b is the canary and
// fails, one pod ran the change, and a is never stamped. Before, a was the
// canary: three pods of the bad change.
func TestTheCheapestCanaryGoesFirst(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, costNamespace, nil)
	a, b := tenantApp(ns, "a"), tenantApp(ns, "b")
	a.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), a, b)
	waitComplete(t, ns, a.Name, b.Name)
	before := framework.TemplateHash(get(t, a))

	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	bad, ran := stuckHashIn(ns), map[string]bool{}
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		ranBad(t, ns, bad, ran, a.Name, b.Name)
		r := state(t, b)
		return r.State == rollout.Failed, fmt.Sprintf("b's record %+v, a's %+v; pods of the bad change %d", r, state(t, a), len(ran))
	})
	// Past the debounce and the halt's notice, a stays unstamped.
	stayUnstamped(t, a, before)
	ranBad(t, ns, bad, ran, a.Name, b.Name)
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the bad change (%v), want 1: b, held at one pod, was to be the canary", len(ran), ran)
	}
}

// TestAFailedOrderedReadyStatefulSetWarnsOfItsPod: a StatefulSet of
// three replicas, podManagementPolicy OrderedReady (the default), a bad
// change (kwok keeps its pods unready): its canary pod fails, and
// configstamp says at once, with a Warning FixNeedsPodDelete, that no fix
// reaches that pod until someone deletes it (kubernetes/kubernetes#67250),
// as the test then sees: the fix applied, the broken pod keeps the bad
// change past the debounce; deleted, as a user would, the fix rolls to
// every pod. Before, nothing said so: the fix hung with no word.
func TestAFailedOrderedReadyStatefulSetWarnsOfItsPod(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, orderedNamespace, nil)
	sts := framework.StatefulSet(ns, "db", framework.OptIn, tenantSpec())
	sts.Spec.Replicas = ptr.To[int32](3)
	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), sts)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		s := get(t, sts)
		return s.Status.ReadyReplicas == 3 && s.Status.UpdateRevision == s.Status.CurrentRevision, fmt.Sprintf("statefulset %+v", s.Status)
	})

	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	note := env.WaitEvent(t, sts, rollout.ReasonFixNeedsPodDelete, "kubectl delete pod")
	t.Logf("FixNeedsPodDelete: %s", note)
	bad := stuckHashIn(ns)
	broken := &corev1.Pod{}
	broken.Namespace, broken.Name = ns, "db-2" // the canary: the highest ordinal, above the hold's partition
	if h := get(t, broken).Annotations[stamp.AnnotationHash]; h != bad {
		t.Fatalf("db-2 runs %s, want the bad change %s: it was the canary", h, bad)
	}

	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "fixed"}, nil))
	fixed := hashOf(ns, tenantSpec(), framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "fixed"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return framework.TemplateHash(get(t, sts)) == fixed, "the fix not stamped yet"
	})
	stamped := time.Now()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		if h := get(t, broken).Annotations[stamp.AnnotationHash]; h != bad {
			t.Fatalf("db-2 was replaced (%s) without a delete: the warning was not true", h)
		}
		return time.Since(stamped) > 15*time.Second, "watching db-2"
	})
	env.Kubectl(t, "", "delete", "pod", "-n", ns, "db-2", "--wait=false")
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		s := get(t, sts)
		pods := env.LivePods(t, ns, map[string]string{"app": sts.Name})
		n := 0
		for _, p := range pods {
			if p.Annotations[stamp.AnnotationHash] == fixed {
				n++
			}
		}
		return n == 3 && s.Status.ReadyReplicas == 3, fmt.Sprintf("%d of 3 pods run the fix; statefulset %+v", n, s.Status)
	})
}

// TestUserActsOnTheCanary: a user acts on a running canary of a bad change
// (kwok keeps its pods unready); a, rollout-priority 10, is the canary, b
// waits.
//   - a deleted (kubectl delete): b is the change's canary next, held at one
//     new pod, and fails: one pod of b ran the bad change, not three.
//   - a's image edited (kubectl set image): its controller makes a new
//     ReplicaSet, still held at one new pod; a fails and halts the change,
//     and b is never stamped. Two pods of a ran the bad change, one per
//     ReplicaSet: the user's edit replaced the canary's pod.
func TestUserActsOnTheCanary(t *testing.T) {
	t.Parallel()
	l := lane(t)
	canaryOf := func(t *testing.T, ns string) (a, b *appsv1.Deployment, bad string, ran map[string]bool) {
		a, b = tenantApp(ns, "a"), tenantApp(ns, "b")
		a.Annotations = map[string]string{rollout.AnnotationPriority: "10"}
		env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), a, b)
		waitComplete(t, ns, a.Name, b.Name)
		env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
		bad, ran = stuckHashIn(ns), map[string]bool{}
		framework.Eventually(t, time.Minute, func() (bool, string) {
			ranBad(t, ns, bad, ran, a.Name, b.Name)
			r := state(t, a)
			return len(ran) == 1 && r.Canary == rollout.CanaryRunning, fmt.Sprintf("a's record %+v; pods of the bad change %d", r, len(ran))
		})
		return a, b, bad, ran
	}
	t.Run("deleted", func(t *testing.T) {
		t.Parallel()
		ns := l.NamespaceNamed(t, deletedNamespace, nil)
		a, b, bad, _ := canaryOf(t, ns)
		env.Kubectl(t, "", "delete", "-n", ns, "deployment/"+a.Name, "--wait=false")
		ranB := map[string]bool{}
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			ranBad(t, ns, bad, ranB, b.Name)
			r := state(t, b)
			return r.State == rollout.Failed, fmt.Sprintf("b's record %+v; pods of b with the bad change %d", r, len(ranB))
		})
		if r := state(t, b); r.Canary != rollout.CanaryRunning || r.Hold == "" {
			t.Errorf("b's record %+v: want it the change's canary, held", r)
		}
		ranBad(t, ns, bad, ranB, b.Name)
		if len(ranB) != 1 {
			t.Fatalf("%d pods of b ran the bad change (%v), want 1: with a deleted, b was to be the canary, held at one pod", len(ranB), ranB)
		}
	})
	t.Run("image edited", func(t *testing.T) {
		t.Parallel()
		ns := l.NamespaceNamed(t, imageNamespace, nil)
		a, b, bad, ran := canaryOf(t, ns)
		before := framework.TemplateHash(get(t, b))
		env.Kubectl(t, "", "set", "image", "-n", ns, "deployment/"+a.Name, a.Spec.Template.Spec.Containers[0].Name+"=example.com/app:v2")
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			ranBad(t, ns, bad, ran, a.Name, b.Name)
			r := state(t, a)
			return r.State == rollout.Failed && r.Halted != "", fmt.Sprintf("a's record %+v; pods of the bad change %d", r, len(ran))
		})
		stayUnstamped(t, b, before)
		ranBad(t, ns, bad, ran, a.Name, b.Name)
		if len(ran) > 2 {
			t.Fatalf("%d pods ran the bad change (%v), want at most 2: a's canary pod and the one of the ReplicaSet the image edit made", len(ran), ran)
		}
		t.Logf("%d pods ran the bad change after the canary's image was edited", len(ran))
	})
}
