package workload

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// daemonSetKind is the built-in kind DaemonSet.
var daemonSetKind = Kind{
	Name: "DaemonSet", Resource: "daemonsets", ShortName: "ds",
	New:     func() client.Object { return &appsv1.DaemonSet{} },
	NewList: func() client.ObjectList { return &appsv1.DaemonSetList{} },
	Items: func(l client.ObjectList) []client.Object {
		return itemPointers(l.(*appsv1.DaemonSetList).Items)
	},
	behavior: typed[*appsv1.DaemonSet]{daemonSet{}},
}

// daemonSet is the Behavior of DaemonSets.
type daemonSet struct{}

func (daemonSet) Template(d *appsv1.DaemonSet) *corev1.PodTemplateSpec { return &d.Spec.Template }

// Status: OnDelete has nothing to wait for (pods change only when someone
// deletes them), nor has a DaemonSet that runs on no node (its controller
// observed it and schedules no pod: a node selector no node matches); else
// the latest generation observed and every scheduled node updated and
// available (the NotReady nodes a judgement finds alone in the way,
// NodeRollout.NotWaitedFor, are not waited for once it is Observed: their pods
// cannot be replaced until their node is back or gone). No node is read
// from the last observed generation: a stamp does not move the nodes a
// DaemonSet runs on.
func (daemonSet) Status(d *appsv1.DaemonSet) Status {
	st := d.Status
	onDelete := d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
	noNode := st.ObservedGeneration > 0 && st.DesiredNumberScheduled == 0 && st.CurrentNumberScheduled == 0
	return Status{
		Complete: onDelete || (st.ObservedGeneration >= d.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled &&
			st.NumberAvailable >= st.DesiredNumberScheduled),
		Observed:         st.ObservedGeneration >= d.Generation,
		NothingToWaitFor: onDelete || noNode,
		Empty:            noNode,
		// Its controller replaces an old pod that is not available at
		// once, whatever maxUnavailable allows: each is a canary pod too.
		CanaryPods: 1 + int64(max(st.NumberUnavailable, 0)),
		Mark:       fmt.Sprint(st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable),
		Ready:      int64(st.NumberReady),
		Available:  int64(st.NumberAvailable),
		MinReady:   seconds(d.Spec.MinReadySeconds),
	}
}

// Slim drops the selector and the conditions, and keeps of the update
// strategy its type (Status reads it).
func (daemonSet) Slim(w *appsv1.DaemonSet, _ *corev1.PodTemplateSpec) {
	w.Spec.Selector = nil // the update strategy tells how a canary is held (Hold)
	w.Status.Conditions = nil
}

// Revisions: a DaemonSet's revisions are its ControllerRevisions.
func (daemonSet) Revisions() client.ObjectList { return &appsv1.ControllerRevisionList{} }

func (daemonSet) RevisionNumber(rev client.Object) int64 { return controllerRevisionNumber(rev) }

// Hold: a rolling update over two nodes or more updates one node
// at a time (a surge of one, or one unavailable) and goes on only once the
// new pod stayed Ready for minReadySeconds, raised to the window and
// LateReadyMargin (a DaemonSet has no progress deadline to stay under).
func (daemonSet) Hold(d *appsv1.DaemonSet, window time.Duration) Hold {
	if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType || d.Status.DesiredNumberScheduled < 2 {
		return nil
	}
	var surge, unavailable *intstr.IntOrString
	if ru := d.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		surge, unavailable = ru.MaxSurge, ru.MaxUnavailable
	}
	if surge == nil {
		zero := intstr.FromInt32(0) // a DaemonSet's default: no surge
		surge = &zero
	}
	b := &holdBuilder{}
	rollingHold(b, "spec.updateStrategy.rollingUpdate", d.Status.DesiredNumberScheduled, surge, unavailable, d.Spec.MinReadySeconds, window, 0)
	return b.h
}

// Freeze: none. A DaemonSet has no pause; its hold (one node, and
// minReadySeconds) is all that keeps a failed canary at one node.
func (daemonSet) Freeze(*appsv1.DaemonSet) Hold { return nil }

// Nodes: one pod per node, which its controller cannot replace on a
// NotReady node (notready.go).
func (daemonSet) Nodes(d *appsv1.DaemonSet) NodeRollout { return daemonSetNodes{d} }
