package controllers

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// Pods are read, never cached: only the few workloads whose rollout is
// verifying (at most the budget) or whose failed rollout halts its change
// need them, and a pod cache would grow with the cluster.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// verification is what the rules need to judge obj's rollout beyond its
// status: its verification window and, while its rollout is verifying or a
// failed rollout of it halts its change, the first sign of failure among the
// pods of its current revision (its own pods, stamped like its template),
// read live: once per judgement, which happens on a status change of the
// workload and at the window's end. Only a record configstamp sealed asks
// for the read, so a tenant's hand-written state costs nothing. A read that
// fails leaves the pods unread (the rollout is not completed unseen) and the
// rest of the reconcile goes on: a fix can still supersede it.
func (r *WorkloadReconciler) verification(ctx context.Context, obj client.Object) rollout.Verification {
	window, _ := rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow) // a bad value is told by compute
	v := rollout.Verification{Window: rollout.EffectiveWindow(obj, window)}
	if as := rollout.Read(obj.GetAnnotations()); as.State != rollout.Verifying && (as.State != rollout.Failed || as.Halted == "") {
		return v // nothing to read: no seal to check either (most workloads, most reconciles)
	}
	rec, err := rollout.Verify(obj, r.Scheduler.Keys)
	if err != nil {
		return v
	}
	seen := rollout.PodsSeen{Started: rec.Started}
	switch {
	case rec.State == rollout.Verifying:
		seen.From = rec.Until.Add(-v.Window)
	case rec.State == rollout.Failed && rec.Halted != "":
		// Read only when the workload is complete: it may then resume.
		if complete, _ := rollout.Complete(r.Kind, obj); !complete {
			return v
		}
	default:
		return v
	}
	tmpl := r.Kind.PodTemplate(obj)
	if r.APIReader == nil || tmpl == nil || len(tmpl.Labels) == 0 {
		return v
	}
	pods := &corev1.PodList{}
	err = r.APIReader.List(ctx, pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels(tmpl.Labels))
	switch {
	case apierrors.IsForbidden(err):
		// An installation whose RBAC predates verification: judged by the
		// workload's status alone.
		log.FromContext(ctx).Info("cannot list pods: the rollout is verified by the workload's status only", "error", err.Error())
		return v
	case err != nil:
		log.FromContext(ctx).Error(err, "while reading the pods of a rollout under verification")
		v.Unread = true
		return v
	}
	seen.Hash, seen.Pods = tmpl.Annotations[stamp.AnnotationHash], ownPods(obj, pods.Items)
	v.Problem = rollout.InspectPods(seen)
	return v
}

// ownPods are the pods whose controller is obj, or one of obj's ReplicaSets
// (named after obj and the pod's pod-template-hash, as the Deployment
// controller and Argo Rollouts name them): another workload whose template
// has the same labels, and references the same data, is not obj.
func ownPods(obj client.Object, pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		c := metav1.GetControllerOf(&p)
		switch {
		case c == nil:
		case c.Kind == "ReplicaSet" && c.Name == obj.GetName()+"-"+p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]:
			out = append(out, p)
		case c.UID == obj.GetUID():
			out = append(out, p)
		}
	}
	return out
}
