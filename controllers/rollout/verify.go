package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Verification bounds.
const (
	// MaxVerifyWindow caps a workload's own verification window
	// (AnnotationVerifyWindow): a tenant cannot hold a slot longer with it.
	MaxVerifyWindow = 10 * time.Minute
)

// Verification is what the rules weigh of a rollout that is complete as
// `kubectl rollout status` says: how long its new revision must stay healthy,
// and what its pods showed when they were last read.
type Verification struct {
	// Window: how long after completion the new revision must stay healthy
	// (minReadySeconds deducted: the controller waited that long already).
	// 0: a rollout is completed as soon as it is complete.
	Window time.Duration
	// Problem: the first sign of failure among the new revision's pods
	// (InspectPods), "" when none was seen or they were not read. They are
	// read while the rollout is verifying, and while a failed rollout halts
	// its change (it resumes only without one).
	Problem string
	// Unread: they could not be read (an API error): a verifying rollout is
	// not judged completed without them.
	Unread bool
}

// AnnotationOnFailure (user, on a workload or its Namespace; the workload's
// valid value wins): "undo" returns a pinned workload whose rollout failed to
// its previous revision, whose snapshots hold the config it ran before;
// "halt" only halts. Without it, --on-failure decides.
const AnnotationOnFailure = "configstamp.io/on-failure"

// OnFailure reads AnnotationOnFailure: whether a failed rollout is undone.
// A bad value is a Problem, and the Namespace's value or def applies.
func OnFailure(workloadAnnotations, namespaceAnnotations map[string]string, def bool) (bool, []stamp.Problem) {
	var problems []stamp.Problem
	for _, a := range []struct {
		where string
		m     map[string]string
	}{{"annotation", workloadAnnotations}, {"namespace annotation", namespaceAnnotations}} {
		v, ok := a.m[AnnotationOnFailure]
		if !ok {
			continue
		}
		switch strings.TrimSpace(v) {
		case "undo":
			return true, problems
		case "halt":
			return false, problems
		}
		problems = append(problems, stamp.Problem{Field: a.where + " " + AnnotationOnFailure, Value: v, Message: `is neither "undo" nor "halt"`})
	}
	return def, problems
}

// VerifyWindow is the verification window of a workload: its
// AnnotationVerifyWindow, else def; malformed, negative or beyond
// MaxVerifyWindow a Problem (and def, or the cap).
func VerifyWindow(annotations map[string]string, def time.Duration) (time.Duration, *stamp.Problem) {
	d, p := durationAnnotation(annotations, AnnotationVerifyWindow, def, "30s")
	if p == nil && d > MaxVerifyWindow {
		return MaxVerifyWindow, &stamp.Problem{Field: "annotation " + AnnotationVerifyWindow, Value: annotations[AnnotationVerifyWindow],
			Message: fmt.Sprintf("is longer than %v, the longest a rollout may hold a slot for verification; %v is used", MaxVerifyWindow, MaxVerifyWindow)}
	}
	return d, p
}

// EffectiveWindow is window less obj's minReadySeconds, which its controller
// already waited before it counted a new pod available.
func EffectiveWindow(obj client.Object, window time.Duration) time.Duration {
	var minReady int32
	switch w := obj.(type) {
	case *appsv1.Deployment:
		minReady = w.Spec.MinReadySeconds
	case *appsv1.StatefulSet:
		minReady = w.Spec.MinReadySeconds
	case *appsv1.DaemonSet:
		minReady = w.Spec.MinReadySeconds
	}
	return max(0, window-time.Duration(minReady)*time.Second)
}

// crashReasons are the waiting reasons of a container that failed to run
// with what it was given.
var crashReasons = []string{"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// PodsSeen is the pods of a workload's current revision as read for one
// judgement, and the times that say which of their events count.
type PodsSeen struct {
	// Pods: the workload's own pods (its controller's, by owner reference).
	Pods []corev1.Pod
	// Hash: the template's stamp, copied to every pod made from it; pods of
	// other revisions are passed over.
	Hash string
	// Started: the rollout's start. A restart or a failed pod before it (a
	// reverted change reuses an old revision, with its pods' history) counts
	// for nothing.
	Started time.Time
	// From: when the verification began; every pod of the revision made
	// before it was available then, and so was one made in its second that
	// became ready and lost it since (existedAt). Zero: no readiness rule.
	From time.Time
}

// InspectPods looks for the first sign of failure among the pods of the new
// revision since the rollout started: a container that restarted, exited or
// waits in CrashLoopBackOff (or cannot be created), a pod that failed, or a
// pod whose containers lost their readiness although it existed when the
// verification began. A pod made later (a scale-up, a replacement) may take
// its time to become Ready: it fails only by crashing. A pod whose node was
// lost is not Ready while its containers still are (ContainersReady): that is
// no failure of the config. Pods being deleted are passed over. "" when all
// is well.
func InspectPods(seen PodsSeen) string {
	pods := slices.Clone(seen.Pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		p := &pods[i]
		if p.Annotations[stamp.AnnotationHash] != seen.Hash || p.DeletionTimestamp != nil {
			continue
		}
		if problem := podProblem(p, seen); problem != "" {
			return "pod " + p.Name + ": " + problem
		}
	}
	return ""
}

func podProblem(p *corev1.Pod, seen PodsSeen) string {
	made := p.CreationTimestamp.Time
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for i := range statuses {
		if problem := containerProblem(&statuses[i], i < len(p.Status.InitContainerStatuses), made, seen.Started); problem != "" {
			return problem
		}
	}
	switch terminal := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded; {
	case terminal && made.Before(seen.Started): // history of a revision a revert brought back
		return ""
	case p.Status.Phase == corev1.PodFailed:
		return fmt.Sprintf("failed (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	if ready, since := containersReady(p); !ready && !seen.From.IsZero() && existedAt(p, seen.From, since) {
		return fmt.Sprintf("lost its readiness at %s (%s)", since.UTC().Format(time.RFC3339), readyReason(p))
	}
	return ""
}

// containerProblem: since the rollout started (or in a pod made since), a
// restart, an exit (an init container's exit 0 is its success), or a waiting
// reason of a container that cannot run.
func containerProblem(cs *corev1.ContainerStatus, init bool, made, started time.Time) string {
	recent := func(t *corev1.ContainerStateTerminated) bool {
		return !made.Before(started) || (t != nil && !t.FinishedAt.Time.Before(started))
	}
	waiting := ""
	if w := cs.State.Waiting; w != nil && slices.Contains(crashReasons, w.Reason) {
		waiting = ", " + w.Reason
	}
	last, t := cs.LastTerminationState.Terminated, cs.State.Terminated
	switch {
	case cs.RestartCount > 0 && recent(last):
		return fmt.Sprintf("container %s restarted %d times%s%s", cs.Name, cs.RestartCount, exitOf(last), waiting)
	case t != nil && (t.ExitCode != 0 || !init) && recent(t):
		return fmt.Sprintf("container %s exited%s, restarted %d times", cs.Name, exitOf(t), cs.RestartCount)
	case waiting != "" && (recent(last) || cs.RestartCount == 0):
		return fmt.Sprintf("container %s cannot run%s: %s", cs.Name, waiting, cs.State.Waiting.Message)
	}
	return ""
}

func exitOf(t *corev1.ContainerStateTerminated) string {
	if t == nil {
		return ""
	}
	out := fmt.Sprintf(" (exit code %d", t.ExitCode)
	if t.Reason != "" {
		out += ", " + t.Reason
	}
	return out + ")"
}

// existedAt reports whether p, not ready since since, was one of the pods
// verification began with at from. Both times have whole seconds (the API's
// creationTimestamp, the record's Until): on a node that starts a container
// in under a second the rollout's own pod is made in the second verification
// begins (CI, test/realnode, passed over a pod that went unready). A pod made
// in that second counts when it lost its readiness after its containers
// started: a pod still starting has been not ready since before they ran.
func existedAt(p *corev1.Pod, from, since time.Time) bool {
	made := p.CreationTimestamp.Time
	if !made.Equal(from) {
		return made.Before(from)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if r := cs.State.Running; r == nil || !since.After(r.StartedAt.Time) {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// containersReady reads the pod's ContainersReady condition: what its
// containers' probes say (PodReady also turns False when its node is lost).
func containersReady(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, p.CreationTimestamp.Time
}

func readyReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Reason != "" {
			return c.Reason
		}
	}
	return "containers not ready"
}
