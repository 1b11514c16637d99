package controllers

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// rolloutState tells whether the rollout of a workload, started at started,
// has completed or failed. A Deployment fails when its own progress deadline
// passes (ProgressDeadlineExceeded); a StatefulSet or DaemonSet when deadline
// passes without completion. A paused Deployment counts as complete: it will
// not roll until unpaused, so it should not hold a slot.
func rolloutState(obj client.Object, started time.Time, deadline time.Duration, now time.Time) (complete, failed bool) {
	late := now.Sub(started) > deadline
	switch w := obj.(type) {
	case *appsv1.Deployment:
		st, want := w.Status, replicas(w.Spec.Replicas)
		if w.Spec.Paused {
			return true, false
		}
		if st.ObservedGeneration < w.Generation {
			return false, false
		}
		for _, c := range st.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
				return false, true
			}
		}
		return st.UpdatedReplicas == want && st.AvailableReplicas == want && st.Replicas == want, false
	case *appsv1.StatefulSet:
		st, want := w.Status, replicas(w.Spec.Replicas)
		done := st.ObservedGeneration >= w.Generation && st.UpdateRevision == st.CurrentRevision &&
			st.UpdatedReplicas == want && st.ReadyReplicas == want && st.AvailableReplicas == want
		return done, !done && late
	case *appsv1.DaemonSet:
		st := w.Status
		done := st.ObservedGeneration >= w.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
			st.NumberAvailable == st.DesiredNumberScheduled && st.NumberUnavailable == 0
		return done, !done && late
	}
	return true, false
}

// inProgress reports whether a rollout configstamp started (the workload
// carries AnnotationRolloutStarted) still holds its slot: the status does not
// show it complete. The annotation stays after completion (no second PATCH per
// rollout); the status tells the slot is free. A failed rollout keeps its slot
// until configstamp records the halt and drops the annotation in one PATCH, so
// that no other workload starts the same change in between.
func inProgress(obj client.Object) bool {
	if _, ok := obj.GetAnnotations()[stamp.AnnotationRolloutStarted]; !ok {
		return false
	}
	complete, _ := rolloutState(obj, time.Now(), time.Duration(1<<62), time.Now())
	return !complete
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
