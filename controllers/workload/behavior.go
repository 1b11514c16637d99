package workload

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Behavior is what differs from one kind of workload to another: where its
// pod template sits, how its spec and status tell a rollout's progress, what
// of it the cache keeps, and where its revisions are. One implementation per
// kind, one file each (deployment.go, statefulset.go, daemonset.go, and
// custom.go for the kinds of --kinds-config); a Kind carries its own.
type Behavior interface {
	// Template returns obj's pod template, nil when obj is not of this kind.
	Template(obj client.Object) *corev1.PodTemplateSpec
	// Status reads obj's spec and status as a rollout needs them (the
	// complete status of an object of no rollout when obj is not of this kind).
	Status(obj client.Object) Status
	// Slim strips obj, in place, to what the cache keeps of its spec and
	// status; tmpl is its pod template already stripped (for an extra kind a
	// copy, which Slim writes back).
	Slim(obj client.Object, tmpl *corev1.PodTemplateSpec)
	// Revisions returns an empty list of the type that holds the kind's
	// revisions (nil: configstamp reads none).
	Revisions() client.ObjectList
	// RevisionNumber returns the revision number of rev, one item of a
	// Revisions list.
	RevisionNumber(rev client.Object) int64
	// Hold returns the spec fields that hold obj's rollout at its first new
	// pod until that pod stayed Ready for window, as its own controller
	// honours them (nil: it cannot be held; its whole rollout is the
	// canary). See Hold.
	Hold(obj client.Object, window time.Duration) Hold
	// Freeze returns the spec fields that stop obj's rollout where it is,
	// whatever its pods' availability shows: set when its canary failed, so
	// that its controller makes no second pod of the bad change (nil: its
	// hold alone keeps it, or nothing can).
	Freeze(obj client.Object) Hold
	// Nodes returns the per-node part of obj's rollout, for a kind that
	// runs one pod per node (nil: its pods are bound to no node).
	Nodes(obj client.Object) NodeRollout
}

// typedBehavior is a Behavior of the objects of one Go type T: each kind's
// file implements it, and typed asserts the type once for all of it.
type typedBehavior[T client.Object] interface {
	Template(obj T) *corev1.PodTemplateSpec
	Status(obj T) Status
	Slim(obj T, tmpl *corev1.PodTemplateSpec)
	Revisions() client.ObjectList
	RevisionNumber(rev client.Object) int64
	Hold(obj T, window time.Duration) Hold
	Freeze(obj T) Hold
	Nodes(obj T) NodeRollout
}

// typed is the Behavior of a typedBehavior: an object of another type has
// no template, the status of an object of no rollout (otherStatus), and
// nothing to slim, hold or freeze.
type typed[T client.Object] struct{ b typedBehavior[T] }

func (t typed[T]) Template(obj client.Object) *corev1.PodTemplateSpec {
	if o, ok := obj.(T); ok {
		return t.b.Template(o)
	}
	return nil
}

func (t typed[T]) Status(obj client.Object) Status {
	if o, ok := obj.(T); ok {
		return t.b.Status(o)
	}
	return otherStatus
}

func (t typed[T]) Slim(obj client.Object, tmpl *corev1.PodTemplateSpec) {
	if o, ok := obj.(T); ok {
		t.b.Slim(o, tmpl)
	}
}

func (t typed[T]) Revisions() client.ObjectList { return t.b.Revisions() }

func (t typed[T]) RevisionNumber(rev client.Object) int64 { return t.b.RevisionNumber(rev) }

func (t typed[T]) Hold(obj client.Object, window time.Duration) Hold {
	if o, ok := obj.(T); ok {
		return t.b.Hold(o, window)
	}
	return nil
}

func (t typed[T]) Freeze(obj client.Object) Hold {
	if o, ok := obj.(T); ok {
		return t.b.Freeze(o)
	}
	return nil
}

func (t typed[T]) Nodes(obj client.Object) NodeRollout {
	if o, ok := obj.(T); ok {
		return t.b.Nodes(o)
	}
	return nil
}

// Status is a workload's spec and status as a rollout reads them, with the
// semantics of `kubectl rollout status` (its status viewers) for each kind.
type Status struct {
	// Complete: the rollout of the current template is complete (a paused
	// Deployment counts as complete: it will not roll until resumed).
	Complete bool
	// Observed: its controller observed the current template (a DaemonSet's
	// observedGeneration). A rollout whose only unfinished pods are on
	// NotReady nodes its controller cannot replace them on (NodeRollout.NotWaitedFor,
	// rollout.Verification.NotWaitedFor) counts as complete once observed.
	Observed bool
	// Exceeded: the rollout failed as its controller reports it (a
	// Deployment's ProgressDeadlineExceeded, an extra kind's failed phase).
	Exceeded bool
	// FailedReason says why, when Exceeded.
	FailedReason string
	// Paused: a paused Deployment.
	Paused bool
	// NothingToWaitFor: a new template replaces no pod by itself (update
	// strategy OnDelete, no replicas, a StatefulSet partition at or above
	// its replicas, an extra kind without progress), so a rollout holds no
	// slot and verifies nothing.
	NothingToWaitFor bool
	// Empty: it runs no pod and wants none now (no replicas, a DaemonSet
	// on no node), but will make pods of its current template by itself
	// once it wants some (a scale-up, a node that joins). Empty implies
	// NothingToWaitFor.
	Empty bool
	// CanaryPods: how many pods a canary of it runs a change on (0: one):
	// its kind holds a rollout at one new pod (or node), but a Recreate
	// Deployment replaces them all at once. The wave puts the cheaper
	// canary first among workloads of one priority.
	CanaryPods int64
	// KeepsBrokenPods: its controller replaces no pod of a failed revision
	// that never becomes Ready, so no later template reaches that pod until
	// someone deletes it (a StatefulSet with podManagementPolicy
	// OrderedReady, the default: kubernetes/kubernetes#67250).
	KeepsBrokenPods bool
	// Mark is what of the status tells the rollout's progress: any change
	// of it is progress.
	Mark string
	// Ready and Available are the pods counted ready and available (0 for
	// an extra kind): fewer than before is a loss of readiness.
	Ready, Available int64
	// MinReady is how long the kind's controller waits before it counts a
	// new pod available (a Deployment's or DaemonSet's minReadySeconds; 0
	// for a StatefulSet, complete on its ready replicas, and an extra kind).
	MinReady time.Duration
}

// Idle reports whether the workload can make no pod of a new template now:
// paused, or nothing to wait for. Such a workload is never its change's
// canary (a canary passes only on a judged pod).
func (s Status) Idle() bool { return s.Paused || s.NothingToWaitFor }

// Dormant reports whether the workload makes no pod now but will, by
// itself, make pods of its current template later: paused (until resumed)
// or Empty. A template stamped on it now would reach those pods untried,
// so it waits for its change's canary elsewhere, unstamped; until then its
// pods, when they come, run the config it has.
func (s Status) Dormant() bool { return s.Paused || s.Empty }

// otherStatus is the status of an object of no rollout configstamp follows:
// complete.
var otherStatus = Status{Complete: true}

// reasonDeadlineExceeded is the FailedReason of a Deployment whose progress
// deadline was exceeded.
const reasonDeadlineExceeded = "its progress deadline was exceeded (ProgressDeadlineExceeded)"

// replicas reads a desired replica count, 1 when unset.
func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// seconds is n seconds.
func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }
