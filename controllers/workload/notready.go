package workload

import (
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// NodeState is what a DaemonSet's rollout reads of a node: whether it is
// Ready, and its taints (which decide whether the DaemonSet controller counts
// it in desiredNumberScheduled).
type NodeState struct {
	Ready  bool
	Taints []corev1.Taint
}

// NodeStateOf reads n.
func NodeStateOf(n *corev1.Node) NodeState {
	s := NodeState{Taints: n.Spec.Taints}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return s
}

// NodeRollout is the per-node part of the rollout of a kind that runs one
// pod per node (Behavior.Nodes): where it is not done, and which NotReady
// nodes alone keep it from complete or stall its own controller.
type NodeRollout interface {
	// Unfinished: the nodes where the rollout is not done yet.
	Unfinished(pods []corev1.Pod, hash string, now time.Time) []string
	// NotWaitedFor: the NotReady nodes that alone keep it from complete.
	NotWaitedFor(pods []corev1.Pod, hash string, unfinished []string, nodes map[string]NodeState) []string
	// StalledBy: the NotReady nodes that stall its own controller.
	StalledBy(unfinished []string, nodes map[string]NodeState) []string
}

// daemonSetNodes is a DaemonSet's NodeRollout.
type daemonSetNodes struct{ d *appsv1.DaemonSet }

// Unfinished returns the nodes where the DaemonSet's rollout is not done yet:
// nodes holding a pod of d (pods: its own, any revision) but none of its
// current template (stamped hash), not being deleted, and available (Ready
// for its minReadySeconds at now). Sorted.
func (ds daemonSetNodes) Unfinished(pods []corev1.Pod, hash string, now time.Time) []string {
	d := ds.d
	done, seen := map[string]bool{}, map[string]bool{}
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if node == "" || p.Status.Phase == corev1.PodSucceeded || (p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp != nil) {
			continue
		}
		seen[node] = true
		if p.DeletionTimestamp == nil && p.Annotations[stamp.AnnotationHash] == hash && available(p, seconds(d.Spec.MinReadySeconds), now) {
			done[node] = true
		}
	}
	var out []string
	for node := range seen {
		if !done[node] {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// NotWaitedFor returns the NotReady nodes that alone keep the DaemonSet's
// rollout from being complete, or nil. unfinished are Unfinished's
// nodes, nodes their states. A DaemonSet pod on a node that stopped
// reporting can be neither replaced nor deleted there (its kubelet must
// confirm), so its rollout never completes by its status; what a user
// expects is the rollout complete once every pod on a Ready node is of the
// new template and available, the NotReady nodes reported, not waited for.
// So: every unfinished node is known and not Ready, and d's status counts
// every other node it wants updated and available (the NotReady nodes it
// counts in desiredNumberScheduled — those whose taints its pods tolerate —
// deducted).
func (ds daemonSetNodes) NotWaitedFor(pods []corev1.Pod, hash string, unfinished []string, nodes map[string]NodeState) []string {
	d := ds.d
	st := d.Status
	if st.ObservedGeneration < d.Generation || len(unfinished) == 0 {
		return nil
	}
	var counted int32 // NotReady nodes the status counts as desired
	for _, name := range unfinished {
		n, ok := nodes[name]
		if !ok || n.Ready {
			return nil
		}
		if toleratesAll(podOn(pods, name), n.Taints) {
			counted++
		}
	}
	// Updated: a NotReady node may hold a new pod that never ran (a surge,
	// or one made after the old was gone): the status counts it updated.
	if st.UpdatedNumberScheduled+counted < st.DesiredNumberScheduled || st.NumberAvailable+counted < st.DesiredNumberScheduled {
		return nil
	}
	return unfinished
}

// StalledBy returns the NotReady nodes that stall the DaemonSet's rolling
// update in its own controller, or nil. unfinished are Unfinished's
// nodes, nodes their states. Without surge, the DaemonSet controller counts
// a node whose pod is not available (a NotReady node's, old or new) against
// maxUnavailable, and updates no further node while that budget is used up
// (kubernetes/kubernetes#117204): with maxUnavailable 1 (the default) and a
// node down, the Ready nodes not updated yet keep their old pods until the
// node is Ready again or deleted. So: the status is of the template, some
// unfinished nodes are Ready (left waiting) and the NotReady ones are at
// least maxUnavailable (scaled on desiredNumberScheduled, rounded up, as the
// controller does). Nothing configstamp can do (it deletes no pods), and no
// failure of the change.
func (ds daemonSetNodes) StalledBy(unfinished []string, nodes map[string]NodeState) []string {
	d := ds.d
	if d.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || d.Status.ObservedGeneration < d.Generation {
		return nil
	}
	surge, unavailable := intstr.FromInt32(0), intstr.FromInt32(1)
	if ru := d.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surge = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailable = *ru.MaxUnavailable
		}
	}
	desired := int(d.Status.DesiredNumberScheduled)
	s, errS := intstr.GetScaledValueFromIntOrPercent(&surge, desired, true)
	u, errU := intstr.GetScaledValueFromIntOrPercent(&unavailable, desired, true)
	if errS != nil || errU != nil || s > 0 || u <= 0 {
		return nil
	}
	var down []string
	waiting := false
	for _, name := range unfinished {
		n, ok := nodes[name]
		switch {
		case !ok:
			return nil
		case n.Ready:
			waiting = true
		default:
			down = append(down, name)
		}
	}
	if !waiting || len(down) < u {
		return nil
	}
	return down
}

// podOn is the newest pod of pods on node (nil: none).
func podOn(pods []corev1.Pod, node string) *corev1.Pod {
	var out *corev1.Pod
	for i := range pods {
		if p := &pods[i]; p.Spec.NodeName == node && (out == nil || out.CreationTimestamp.Before(&p.CreationTimestamp)) {
			out = p
		}
	}
	return out
}

// toleratesAll reports whether p tolerates every NoSchedule and NoExecute
// taint of a node: the DaemonSet controller then counts the node as one its
// pod should run on (NodeShouldRunDaemonPod; a NotReady node has the
// not-ready or unreachable NoSchedule taint, which a DaemonSet's own
// tolerations do not cover unless the user's do).
func toleratesAll(p *corev1.Pod, taints []corev1.Taint) bool {
	if p == nil {
		return false
	}
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return t.ToleratesTaint(klog.Background(), taint, false) }) {
			return false
		}
	}
	return true
}

// available: p is Ready, and has been for minReady at now.
func available(p *corev1.Pod, minReady time.Duration, now time.Time) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && (minReady == 0 || !c.LastTransitionTime.Add(minReady).After(now))
		}
	}
	return false
}
