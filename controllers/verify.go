package controllers

import (
	"context"
	"time"

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

// ReasonPodsUnreadable: configstamp may not list pods, so it judges
// rollouts by the workloads' status alone.
const ReasonPodsUnreadable = "PodsUnreadable"

// verification is what the rules need to judge obj's rollout beyond its
// status: its verification window and, while its pods are watched
// (rollout.Watched: its rollout is open, its failure halts its change, or it
// completed a change that still rolls to other workloads), what the pods of
// its current revision (its own pods, stamped like its template) show, read
// live at each judgement: on a status change of the workload, at each poll
// of an open rollout (rollout.PodPoll) and at the window's end. Only a
// record configstamp sealed asks for the read, so a tenant's hand-written
// state costs nothing. A read that fails leaves the pods unread (the rollout
// is not completed unseen, no halt lifts) and the rest of the reconcile goes
// on: a fix can still supersede it.
func (r *kindReconciler) verification(ctx context.Context, obj client.Object) rollout.Verification {
	window, _ := rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow) // a bad value is told by compute
	v := rollout.Verification{Window: rollout.EffectiveWindow(r.Kind, obj, window)}
	// Most workloads and most reconciles read nothing, and check no seal: no
	// record, a failure that halts nothing, or a completed rollout whose
	// change no longer rolls anywhere.
	as := rollout.Read(obj.GetAnnotations())
	key := rollout.Key{Kind: r.Kind.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	switch ongoing := as.State == rollout.Completed && r.Scheduler.Ongoing(ctx, key, rollout.ParseChanges(as.Cause)); {
	case as.State == rollout.None, as.State == rollout.Failed && as.Halted == "":
		return v
	case as.State == rollout.Completed:
		log.FromContext(ctx).V(1).Info("completed rollout", "changeStillRolls", ongoing)
		if !ongoing {
			return v
		}
	}
	rec, err := rollout.Unseal(obj, r.Scheduler.Keys)
	if err != nil {
		return v
	}
	complete, _ := rollout.Complete(r.Kind, obj)
	rule, watched := rollout.Watched(rec, complete, rec.State == rollout.Completed)
	tmpl := r.Kind.PodTemplate(obj)
	if !watched || r.APIReader == nil || tmpl == nil || len(tmpl.Labels) == 0 {
		return v
	}
	now := time.Now()
	seen := rollout.PodsSeen{Rule: rule, Hash: tmpl.Annotations[stamp.AnnotationHash], Started: rec.Started, Now: now}
	switch rule {
	case rollout.RuleVerifying:
		seen.From = rec.Until.Add(-v.Window)
	case rollout.RuleLasting: // crashes before the last window are history
		seen.Started = now.Add(-v.Window)
	case rollout.RuleCrashing:
		// Only a crash now counts (each one wakes this reconcile: it changes
		// the workload's ready counts), not one from long ago.
		seen.Started = latest(rec.Started, now.Add(-max(v.Window, time.Minute)))
	}
	pods := &corev1.PodList{}
	// ResourceVersion "0": served from the API server's watch cache, not
	// etcd; a poll a moment behind is judged again at the next.
	err = r.APIReader.List(ctx, pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels(tmpl.Labels),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
	switch {
	case apierrors.IsForbidden(err):
		// An installation whose RBAC predates verification: judged by the
		// workload's status only, and said so once per workload and process.
		if _, told := r.podsUnreadable.LoadOrStore(obj.GetUID(), true); !told {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonPodsUnreadable, "Verify",
				"configstamp may not list pods (%s): its rollouts are judged by the workload's status only; a crash, a config error or a lost readiness "+
					"is seen only at the progress deadline. Grant list on pods (config/rbac)", err.Error())
		}
		return v
	case err != nil:
		log.FromContext(ctx).Error(err, "while reading the pods of a rollout")
		v.Unread = true
		return v
	}
	seen.Pods = ownPods(obj, pods.Items)
	found := rollout.InspectPods(seen)
	log.FromContext(ctx).V(1).Info("pods judged", "rule", rule, "pods", len(seen.Pods), "problem", found.Problem, "healthy", found.Healthy)
	found.Window, found.PollScale = v.Window, r.Scheduler.PollScale()
	return found
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
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
