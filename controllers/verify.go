package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// pods of its current revision (the pods stamped like its template, found by
// the template's labels), read live: once per judgement, which happens on a
// status change of the workload and at the window's end.
func (r *WorkloadReconciler) verification(ctx context.Context, obj client.Object) (rollout.Verification, error) {
	window, _ := rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow) // a bad value is told by compute
	v := rollout.Verification{Window: rollout.EffectiveWindow(obj, window)}
	rec := rollout.Read(obj.GetAnnotations())
	var from time.Time // pods made before it were all available
	switch {
	case rec.State == rollout.Verifying:
		from = rec.Until.Add(-v.Window)
	case rec.State == rollout.Failed && rec.Halted != "":
		// Read only when the workload is complete: it may then resume.
		if complete, _ := rollout.Complete(r.Kind, obj); !complete {
			return v, nil
		}
	default:
		return v, nil
	}
	tmpl := r.Kind.PodTemplate(obj)
	if r.APIReader == nil || tmpl == nil || len(tmpl.Labels) == 0 {
		return v, nil
	}
	pods := &corev1.PodList{}
	err := r.APIReader.List(ctx, pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels(tmpl.Labels))
	switch {
	case apierrors.IsForbidden(err):
		// An installation whose RBAC predates verification: judged by the
		// workload's status alone.
		log.FromContext(ctx).Info("cannot list pods: the rollout is verified by the workload's status only", "error", err.Error())
		return v, nil
	case err != nil:
		return v, fmt.Errorf("while reading the pods of %s %s/%s: %w", r.Kind.Name, obj.GetNamespace(), obj.GetName(), err)
	}
	v.Problem = rollout.InspectPods(pods.Items, tmpl.Annotations[stamp.AnnotationHash], from)
	return v, nil
}
