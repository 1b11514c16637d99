package workload

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statefulSetKind is the built-in kind StatefulSet.
var statefulSetKind = Kind{
	Name: "StatefulSet", Resource: "statefulsets", ShortName: "sts",
	New:     func() client.Object { return &appsv1.StatefulSet{} },
	NewList: func() client.ObjectList { return &appsv1.StatefulSetList{} },
	Items: func(l client.ObjectList) []client.Object {
		return itemPointers(l.(*appsv1.StatefulSetList).Items)
	},
	behavior: typed[*appsv1.StatefulSet]{statefulSet{}},
}

// statefulSet is the Behavior of StatefulSets.
type statefulSet struct{}

func (statefulSet) Template(s *appsv1.StatefulSet) *corev1.PodTemplateSpec { return &s.Spec.Template }

// Status: OnDelete has nothing to wait for (pods change only when someone
// deletes them); else the latest generation observed, every replica ready,
// and with a partition the replicas at or above it updated, without one the
// update revision current. minReadySeconds does not delay its ReadyReplicas,
// on which it completes: MinReady is 0.
func (statefulSet) Status(s *appsv1.StatefulSet) Status {
	st, want := s.Status, replicas(s.Spec.Replicas)
	nothing := s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || want == 0
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil && *ru.Partition >= want {
		nothing = true
	}
	return Status{
		Complete:         statefulSetComplete(s),
		NothingToWaitFor: nothing,
		Empty:            want == 0,
		KeepsBrokenPods:  s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement,
		Mark:             fmt.Sprint(st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.CurrentReplicas, st.AvailableReplicas, st.UpdateRevision),
		Ready:            int64(st.ReadyReplicas),
		Available:        int64(st.AvailableReplicas),
	}
}

func statefulSetComplete(s *appsv1.StatefulSet) bool {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return true
	}
	st, want := s.Status, replicas(s.Spec.Replicas)
	if st.ObservedGeneration == 0 || st.ObservedGeneration < s.Generation || st.ReadyReplicas < want {
		return false
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return st.UpdatedReplicas >= want-*ru.Partition
	}
	return st.UpdateRevision == st.CurrentRevision
}

// Slim drops the selector, the volume claim templates and the conditions,
// and keeps of the update strategy its type and partition (Status reads
// them).
func (statefulSet) Slim(w *appsv1.StatefulSet, _ *corev1.PodTemplateSpec) {
	w.Spec.Selector, w.Spec.VolumeClaimTemplates = nil, nil
	if ru := w.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		w.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ru.Partition}
	}
	w.Status.Conditions = nil
}

// Revisions: a StatefulSet's revisions are its ControllerRevisions.
func (statefulSet) Revisions() client.ObjectList { return &appsv1.ControllerRevisionList{} }

func (statefulSet) RevisionNumber(rev client.Object) int64 { return controllerRevisionNumber(rev) }

// controllerRevisionNumber is the revision number of a ControllerRevision
// (0 for another object).
func controllerRevisionNumber(rev client.Object) int64 {
	if r, ok := rev.(*appsv1.ControllerRevision); ok {
		return r.Revision
	}
	return 0
}

// Hold: a rolling update of two replicas or more is held by its
// partition at the highest ordinal, the first its controller updates.
func (statefulSet) Hold(s *appsv1.StatefulSet, window time.Duration) Hold {
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || replicas < 2 {
		return nil
	}
	var partition *int32
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		partition = ru.Partition
	}
	if partition != nil && *partition >= replicas-1 {
		return nil // one pod at most rolls already
	}
	b := &holdBuilder{}
	b.set("spec.updateStrategy.rollingUpdate.partition", partition, replicas-1)
	return b.h
}

// Freeze: none; its partition updates no other pod, whatever their availability.
func (statefulSet) Freeze(*appsv1.StatefulSet) Hold { return nil }

// Nodes: none; its pods are bound to no node.
func (statefulSet) Nodes(*appsv1.StatefulSet) NodeRollout { return nil }
