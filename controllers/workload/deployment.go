package workload

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deploymentKind is the built-in kind Deployment.
var deploymentKind = Kind{
	Name: "Deployment", Resource: "deployments", ShortName: "deploy",
	New:     func() client.Object { return &appsv1.Deployment{} },
	NewList: func() client.ObjectList { return &appsv1.DeploymentList{} },
	Items: func(l client.ObjectList) []client.Object {
		return itemPointers(l.(*appsv1.DeploymentList).Items)
	},
	behavior: typed[*appsv1.Deployment]{deployment{}},
}

// deployment is the Behavior of Deployments.
type deployment struct{}

func (deployment) Template(d *appsv1.Deployment) *corev1.PodTemplateSpec { return &d.Spec.Template }

// Status: paused counts as complete (it will not roll until resumed); else
// the controller observed the latest generation, every desired replica is
// updated and available, and no old replica is left. Exceeded: the
// Progressing condition says ProgressDeadlineExceeded.
func (deployment) Status(d *appsv1.Deployment) Status {
	st := d.Status
	out := Status{
		Paused:           d.Spec.Paused,
		NothingToWaitFor: replicas(d.Spec.Replicas) == 0,
		Empty:            replicas(d.Spec.Replicas) == 0,
		Mark:             fmt.Sprint(st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas),
		Ready:            int64(st.ReadyReplicas),
		Available:        int64(st.AvailableReplicas),
		MinReady:         seconds(d.Spec.MinReadySeconds),
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		out.CanaryPods = int64(replicas(d.Spec.Replicas))
	}
	out.Complete, out.Exceeded = deploymentComplete(d)
	if out.Exceeded {
		out.FailedReason = reasonDeadlineExceeded
	}
	return out
}

func deploymentComplete(d *appsv1.Deployment) (complete, exceeded bool) {
	if d.Spec.Paused {
		return true, false
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return false, false
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return false, true
		}
	}
	want := replicas(d.Spec.Replicas)
	return st.UpdatedReplicas >= want && st.Replicas <= st.UpdatedReplicas && st.AvailableReplicas >= st.UpdatedReplicas, false
}

// Slim drops the selector, and keeps of each condition its type, status
// and reason (Status reads ProgressDeadlineExceeded); the strategy tells
// how a canary is held (Hold).
func (deployment) Slim(w *appsv1.Deployment, _ *corev1.PodTemplateSpec) {
	w.Spec.Selector = nil
	var conditions []appsv1.DeploymentCondition
	for _, c := range w.Status.Conditions {
		conditions = append(conditions, appsv1.DeploymentCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
	}
	w.Status.Conditions = conditions
}

// Revisions: a Deployment's revisions are its ReplicaSets.
func (deployment) Revisions() client.ObjectList { return &appsv1.ReplicaSetList{} }

// RevisionNumber is the deployment.kubernetes.io/revision annotation of a
// ReplicaSet (0 when absent or malformed).
func (deployment) RevisionNumber(rev client.Object) int64 {
	n, _ := strconv.ParseInt(rev.GetAnnotations()[annotationDeploymentRevision], 10, 64)
	return n
}

// Freeze: spec.paused. Its rolling update held by availability alone, a
// canary pod that crashes after it was Ready may still count as available
// (a kubelet slow to report the restart), and the controller would go on to
// a second pod; paused, it makes none. Put back with the hold.
func (deployment) Freeze(d *appsv1.Deployment) Hold {
	if d.Spec.Paused {
		return nil
	}
	b := &holdBuilder{}
	b.set("spec.paused", nil, true)
	return b.h
}

// Nodes: none; its pods are bound to no node.
func (deployment) Nodes(*appsv1.Deployment) NodeRollout { return nil }

// annotationDeploymentRevision is the revision number the Deployment
// controller writes on each of its ReplicaSets.
const annotationDeploymentRevision = "deployment.kubernetes.io/revision"

// Hold: a rolling update of two replicas or more; the first new
// pod is made by a surge of one (or, where the user allows no surge, in
// place of one old pod), and its controller goes on only once it stayed
// Ready for minReadySeconds, raised to the window and LateReadyMargin
// (within its progressDeadlineSeconds). A Recreate Deployment,
// or one of one replica, is its whole rollout's canary.
func (deployment) Hold(d *appsv1.Deployment, window time.Duration) Hold {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType || d.Spec.Paused || replicas < 2 {
		return nil
	}
	var surge, unavailable *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		surge, unavailable = ru.MaxSurge, ru.MaxUnavailable
	}
	b := &holdBuilder{}
	rollingHold(b, "spec.strategy.rollingUpdate", replicas, surge, unavailable, d.Spec.MinReadySeconds, window, ptr.Deref(d.Spec.ProgressDeadlineSeconds, 600))
	return b.h
}
