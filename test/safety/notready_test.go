package safety

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/localcp"
)

// The NotReady-node scenario's namespace and its second node: the suite's
// slow node, where kwok makes no pod Ready (TestMain), as a node whose
// kubelet runs nothing; the test then turns it NotReady.
const (
	notReadyNamespace = "ds-notready"
	downNode          = slowNode
	// agentNode: a third node, Ready, tainted so that only the node agents
	// (which tolerate every taint) run there: with two Ready nodes and one
	// down, maxUnavailable 1 stalls the DaemonSet controller itself.
	agentNode = "kwok-agents"
)

// agentSpec is a node agent's pod spec mounting ConfigMap cm: it tolerates
// every taint (so it keeps running on a NotReady node, which its DaemonSet
// counts as one it should run on) and runs on the suite's two nodes only.
func agentSpec(cm string, extraNodes ...string) corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, cm)
	spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: append([]string{localcp.NodeName, downNode}, extraNodes...)}}}}}}}
	return spec
}

// crashingAgentHash is the stamp of the crashing agent when its ConfigMap
// holds v=bad: kwok holds its pods (TestMain), and the test makes the one on
// the Ready node crash.
func crashingAgentHash() string {
	return hashOf(notReadyNamespace, agentSpec("crash-cfg"), framework.ConfigMap(notReadyNamespace, "crash-cfg", map[string]string{"v": "bad"}, nil))
}

// TestDaemonSetDoesNotWaitForANotReadyNode: two DaemonSets span two nodes;
// one node, whose pods never became ready, goes NotReady (its kubelet stops
// reporting); a ConfigMap change
// rolls both. The one whose new pod runs on the Ready node completes without
// a failure or a halt although its pod on the NotReady node can never be
// replaced (without the fix it fails at the progress deadline); the one
// whose new pod crashes on the Ready node still fails, at once.
func TestDaemonSetDoesNotWaitForANotReadyNode(t *testing.T) {
	// TestFinishedRolloutsStayFinished added the slow node with a taint, and
	// deleted it: wait until it is gone, and add it again, untainted.
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, _, err := env.KubectlErr("", "delete", "node", downNode, "--ignore-not-found", "--wait=true")
		return err == nil, fmt.Sprint(err)
	})
	if err := env.CP.AddNode(t.Context(), downNode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.KubectlErr("", "delete", "node", downNode, "--wait=false") })
	if err := env.CP.AddNode(t.Context(), agentNode, corev1.Taint{Key: "configstamp.test/agents-only", Effect: corev1.TaintEffectNoSchedule}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.KubectlErr("", "delete", "node", agentNode, "--wait=false") })
	// Not parallel: it adds nodes. Its namespace is named: its stamps are
	// computed in advance (TestMain holds the crashing agent's pods).
	ns := lane(t).NamespaceNamed(t, notReadyNamespace, nil)
	agent := func(name, cm string) *appsv1.DaemonSet {
		ds := framework.DaemonSet(ns, name, framework.OptIn, agentSpec(cm))
		// No canary hold, and room for both nodes at once: with one node
		// unavailable allowed, the DaemonSet controller itself stops at the
		// NotReady node (kubernetes/kubernetes#117204).
		ds.Annotations = map[string]string{rollout.AnnotationCanaryOpt: "false"}
		two := intstr.FromInt32(2)
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &two}}
		return ds
	}
	good, crashing := agent("agent", "agent-cfg"), agent("crashing", "crash-cfg")
	// The stalled agent runs on three nodes at its default maxUnavailable 1.
	stalled := framework.DaemonSet(ns, "stalled", framework.OptIn, agentSpec("stall-cfg", agentNode))
	stalled.Annotations = map[string]string{rollout.AnnotationCanaryOpt: "false"}
	env.Apply(t, framework.ConfigMap(ns, "agent-cfg", map[string]string{"v": "1"}, nil), framework.ConfigMap(ns, "crash-cfg", map[string]string{"v": "1"}, nil),
		framework.ConfigMap(ns, "stall-cfg", map[string]string{"v": "1"}, nil), good, crashing, stalled)
	for _, ds := range []*appsv1.DaemonSet{good, crashing, stalled} {
		want := int32(2)
		if ds == stalled {
			want = 3
		}
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			s := get(t, ds).Status
			// Its pod on the slow node never becomes ready.
			return s.DesiredNumberScheduled == want && s.NumberAvailable == want-1 && s.UpdatedNumberScheduled == want, fmt.Sprintf("%s: %+v", ds.Name, s)
		})
	}

	// The node's kubelet stops reporting: kwok no longer plays it, and it
	// last said NotReady. Its pods can be neither replaced nor run there.
	// The rollout then makes a new pod there that never becomes ready.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: downNode}}
	env.Get(t, node)
	delete(node.Annotations, "kwok.x-k8s.io/node")
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	env.Get(t, node)
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			node.Status.Conditions[i].Status, node.Status.Conditions[i].Reason = corev1.ConditionFalse, "KubeletNotReady"
			node.Status.Conditions[i].LastTransitionTime, node.Status.Conditions[i].LastHeartbeatTime = metav1.Now(), metav1.Now()
		}
	}
	if err := env.Client.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, node)
		for _, taint := range node.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady && taint.Effect == corev1.TaintEffectNoSchedule {
				return true, ""
			}
		}
		return false, fmt.Sprintf("node %s taints %v", downNode, node.Spec.Taints)
	})

	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "agent-cfg", map[string]string{"v": "2"}, nil), framework.ConfigMap(ns, "crash-cfg", map[string]string{"v": "bad"}, nil),
		framework.ConfigMap(ns, "stall-cfg", map[string]string{"v": "2"}, nil))

	// The crashing agent's new pod on the Ready node crashes (kwok holds it;
	// the test writes what a kubelet would).
	bad := crashingAgentHash()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, p := range env.LivePods(t, ns, map[string]string{"app": "crashing"}) {
			if p.Spec.NodeName != localcp.NodeName || p.Annotations["configstamp.io/config-hash"] != bad {
				continue
			}
			at := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at},
				{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: at}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1", RestartCount: 2,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: at, FinishedAt: at}}}}
			if err := env.Client.Status().Update(t.Context(), &p); err != nil {
				return false, err.Error()
			}
			return true, ""
		}
		return false, "no pod of the bad change on " + localcp.NodeName
	})
	note := env.WaitEvent(t, crashing, "RolloutFailed", "CrashLoopBackOff")
	t.Logf("the crashing agent failed %v after the change: %s", time.Since(changed).Round(time.Millisecond), note)
	if r := state(t, crashing); r.State != rollout.Failed || r.Halted == "" {
		t.Errorf("crashing: record %+v, want failed and halting", r)
	}

	// The good agent completes although its pod on the NotReady node is not
	// replaced, and no deadline fails it afterwards.
	framework.Eventually(t, 2*progressDeadline, func() (bool, string) {
		r := state(t, good)
		return r.State == rollout.Completed, fmt.Sprintf("agent: record %+v, status %+v", r, get(t, good).Status)
	})
	t.Logf("the agent completed %v after the change, its pod on %s not replaced (status %+v)", time.Since(changed).Round(time.Millisecond), downNode, get(t, good).Status)
	env.WaitEvent(t, good, "NodesNotReady", downNode)
	if wait := progressDeadline + 5*time.Second - time.Since(changed); wait > 0 {
		time.Sleep(wait)
	}
	if n := env.CountEvents(t, good, "RolloutFailed"); n != 0 {
		t.Errorf("agent: %d RolloutFailed events", n)
	}
	if r := state(t, good); r.State != rollout.Completed || r.Halted != "" {
		t.Errorf("agent: record %+v, want completed and not halted", r)
	}
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "agent"}); err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, p := range pods.Items {
		on = append(on, p.Spec.NodeName+":"+strings.TrimPrefix(p.Annotations["configstamp.io/config-hash"], "v1-")[:8]+":"+string(p.Status.Phase))
	}
	t.Logf("agent pods: %v", on)

	// The stalled agent: its controller updated one Ready node and waits for
	// the NotReady one (kubernetes/kubernetes#117204), so one Ready node
	// keeps its old pod. configstamp says so once its deadline passed, and
	// fails nothing: no RolloutFailed, no halt, still followed.
	note = env.WaitEvent(t, stalled, controllers.ReasonStalledByNodes, downNode)
	told := time.Now()
	t.Logf("stalled: told %v after the change: %s (status %+v)", told.Sub(changed).Round(time.Millisecond), note, get(t, stalled).Status)
	// Nothing fails it afterwards: watched past another deadline from the
	// tell (which came no sooner than its deadline from the stamp).
	framework.Eventually(t, 2*progressDeadline, func() (bool, string) {
		if n := env.CountEvents(t, stalled, "RolloutFailed"); n != 0 {
			t.Fatalf("stalled: %d RolloutFailed events: a rollout its own controller stalls at a NotReady node failed the change", n)
		}
		if r := state(t, stalled); r.State != rollout.Rolling || r.Halted != "" {
			t.Fatalf("stalled: record %+v, want still rolling, no halt", r)
		}
		return time.Since(told) > progressDeadline+5*time.Second, "watching"
	})
	if s := get(t, stalled).Status; s.UpdatedNumberScheduled >= s.DesiredNumberScheduled {
		t.Errorf("stalled: status %+v: the controller did not stall; the test shows nothing", s)
	}
}
