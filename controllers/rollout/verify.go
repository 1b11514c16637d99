package rollout

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Verification bounds.
const (
	// MaxVerifyWindow caps a workload's own verification window
	// (AnnotationVerifyWindow): a tenant cannot hold a slot longer with it.
	MaxVerifyWindow = 10 * time.Minute
	// readyMargin is added to a pod's probes' budget (ProbeBudget) before a
	// pod whose containers run but never became Ready fails its rollout:
	// twice the budget plus this margin. A readiness probe's failureThreshold
	// is no deadline (the kubelet keeps probing), so an app that warms up
	// more slowly than that should say so with a startupProbe.
	readyMargin = time.Minute
)

// Verification is what the rules weigh of a rollout's pods: how long its new
// revision must stay healthy once `kubectl rollout status` calls it
// complete, and what its pods showed when they were last read.
type Verification struct {
	// Window: how long after completion the new revision must stay healthy
	// (a Deployment's or DaemonSet's minReadySeconds deducted: its controller
	// waited that long already). 0: completed as soon as it is complete.
	Window time.Duration
	// Read: the pods were read for this judgement (Watched said to).
	Read bool
	// Problem: the first sign of failure among the new revision's pods
	// (InspectPods), "" when none was seen or they were not read.
	Problem string
	// Unread: they could not be read (an API error): a rollout is not
	// judged completed, nor a halt lifted, without them.
	Unread bool
	// Healthy: every pod of the revision is Ready now; HealthySince: they
	// have all been Ready, and no container of them restarted, since then
	// (zero: no pod). A halt lifts only after a full window of it.
	Healthy      bool
	HealthySince time.Time
	// Pods: how many pods of the revision run (not ended, not being
	// deleted).
	Pods int
	// FirstHealthySince: of the pods of the revision Ready now, the one
	// healthy the longest has been since then (zero: none is Ready). A
	// canary passes on it.
	FirstHealthySince time.Time
	// Outlast: how long a halted workload's pods must stay healthy besides
	// the window (outlast): longer than the longest run of a container
	// before its last restart, by as long as a busy node's kubelet may take
	// to write the next crash, so a crash loop whose runs outlast the window
	// (a crash 45 s after each start) never looks recovered between two
	// crashes.
	Outlast time.Duration
	// JudgeAt: when a pod whose containers run but that is not Ready yet
	// has had its probes' budget (zero: no such pod).
	JudgeAt time.Time
	// PollScale multiplies PodPoll for this rollout (Scheduler.PollScale;
	// 0 or 1: as it is).
	PollScale int
	// NotWaitedFor: the NotReady nodes whose pods alone keep a DaemonSet's
	// rollout from complete (workload.NodeRollout.NotWaitedFor, PodsSeen.NodesNotReady):
	// they cannot be replaced until their node is back or gone, so the
	// rollout is complete without them once its controller observed the
	// template (StatusSeen).
	NotWaitedFor []string
	// StalledBy: NotReady nodes that stall a DaemonSet's rolling update in
	// its own controller (workload.NodeRollout.StalledBy): no progress then is
	// no failure of the change.
	StalledBy []string
	// Progressed: the last progress its pods show (ProgressOf; zero: none).
	// A new leader's progress deadline counts from it, not from its first
	// look (Scheduler.progressed).
	Progressed time.Time
}

// Rule says which signs of failure among a revision's pods count, by where
// the rollout stands (Watched).
type Rule int

const (
	// RuleRolling: the rollout is under way. A sign the kubelet reports
	// (a container that cannot be created or run, an init container or a
	// container that exited or restarted, a failed pod), a Ready pod that
	// lost its readiness, a pod never Ready past its probes' budget, or a
	// pod waiting for volumes its sources cannot fill past MountGrace
	// (PodsSeen.Unmountable) fails it at once.
	RuleRolling Rule = iota + 1
	// RuleVerifying: complete, and watched for the window: as RuleRolling,
	// and a pod that existed when the window began (PodsSeen.From) and is
	// not Ready.
	RuleVerifying
	// RuleCrashing: completed while its change still rolls to other
	// workloads: only a crash (a container that restarted, exited or waits
	// in CrashLoopBackOff) since the rollout started counts. Readiness
	// decides nothing here: the rollout was verified.
	RuleCrashing
	// RuleLasting: failed and halting its change: the halt lifts only once
	// every pod has been healthy for a full window (HealthySince); crashes
	// before the window are history.
	RuleLasting
)

// Watched says whether the pods of a workload whose sealed record is rec
// are read for a judgement, and by which rule: while its rollout is open,
// while its failure halts its change (complete again: it may recover), and
// once completed while its change still rolls to others (ongoing).
func Watched(rec Record, complete, ongoing bool) (Rule, bool) {
	switch {
	case rec.State == Rolling:
		return RuleRolling, true
	case rec.State == Verifying:
		return RuleVerifying, true
	case rec.State == Failed && rec.Halted != "" && complete:
		return RuleLasting, true
	case rec.State == Completed && ongoing:
		return RuleCrashing, true
	}
	return 0, false
}

// AnnotationOnFailure (user, on a workload or its Namespace; the workload's
// valid value wins): "undo" returns a pinned workload whose rollout failed to
// its previous revision, whose snapshots hold the config it ran before;
// "halt" only halts. Without it, --on-failure decides.
const AnnotationOnFailure = "configstamp.io/on-failure"

// OnFailure reads AnnotationOnFailure: whether a failed rollout is undone.
// A bad value is a Problem, and the Namespace's value or def applies.
func OnFailure(workloadAnnotations, namespaceAnnotations map[string]string, def bool) (bool, []stamp.Problem) {
	return choice(workloadAnnotations, namespaceAnnotations, AnnotationOnFailure, "undo", "halt", def)
}

// choice reads a user's two-valued annotation key from a workload, then its
// Namespace (a valid value on the workload wins): yes gives true, no false,
// def when neither says; another value is a Problem, passed over.
func choice(workloadAnnotations, namespaceAnnotations map[string]string, key, yes, no string, def bool) (bool, []stamp.Problem) {
	var problems []stamp.Problem
	for _, a := range []struct {
		where string
		m     map[string]string
	}{{"annotation", workloadAnnotations}, {"namespace annotation", namespaceAnnotations}} {
		v, ok := a.m[key]
		if !ok {
			continue
		}
		switch strings.TrimSpace(v) {
		case yes:
			return true, problems
		case no:
			return false, problems
		}
		problems = append(problems, stamp.Problem{Field: a.where + " " + key, Value: v, Message: fmt.Sprintf("is neither %q nor %q", yes, no)})
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

// EffectiveWindow is window less obj's minReadySeconds where its controller
// already waited that long before it counted a new pod available (a
// Deployment, a DaemonSet: workload.Status.MinReady). A StatefulSet's
// rollout is complete on its ReadyReplicas, which minReadySeconds does not
// delay: nothing is deducted.
func EffectiveWindow(kind workload.Kind, obj client.Object, window time.Duration) time.Duration {
	return max(0, window-kind.Status(obj).MinReady)
}

// crashReasons are the waiting reasons of a container that failed to run
// with what it was given.
var crashReasons = []string{"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// notTheConfig are the reasons of a failed pod that say the node, not the
// pod's own containers, ended it: an eviction under node pressure, a
// graceful node shutdown, a preemption, a node that could no longer admit
// it. Such a pod is replaced by its controller and fails no rollout.
var notTheConfig = []string{"Evicted", "Shutdown", "Terminated", "NodeShutdown", "Preempting", "NodeLost", "NodeAffinity",
	"UnexpectedAdmissionError", "OutOfcpu", "OutOfmemory", "OutOfpods"}

// PodsSeen is the pods of a workload's current revision as read for one
// judgement, and the times that say which of their events count.
type PodsSeen struct {
	// Rule: which signs count (Watched).
	Rule Rule
	// Pods: the workload's own pods (its controller's, by owner reference).
	Pods []corev1.Pod
	// Hash: the template's stamp, copied to every pod made from it; pods of
	// other revisions are passed over.
	Hash string
	// Started: the rollout's start. A restart or a failed pod before it (a
	// reverted change reuses an old revision, with its pods' history) counts
	// for nothing. RuleLasting: the start of the window that must be healthy.
	Started time.Time
	// From (RuleVerifying): when the verification began; every pod of the
	// revision made before it was available then, and so was one made in
	// its second that became ready and lost it since (existedAt).
	From time.Time
	// Now: the time of the judgement (a pod's probes' budget ends then).
	Now time.Time
	// Unmountable (RuleRolling, RuleVerifying): what the template's volumes
	// need that their sources, as configstamp hashed them for Hash, lack
	// (Unmountable); a pod that waits for its volumes past MountGrace then
	// fails the rollout.
	Unmountable []string
	// NodesNotReady: NotReady nodes a DaemonSet's rollout does not wait for
	// (workload.NodeRollout.NotWaitedFor); their pods are passed over.
	NodesNotReady []string
}

// InspectPods judges the pods of the new revision by seen.Rule (see Rule):
// the first sign of failure in Problem ("" when all is well), when they have
// all been healthy since (HealthySince), and when a pod not Ready yet will
// have had its probes' budget (JudgeAt). A pod whose node was lost is not
// Ready while its containers still are (ContainersReady): that is no failure
// of the config, nor is a pod the node evicted or shut down, nor a restart
// the node caused (reason Unknown: a node reboot). Pods being deleted are
// passed over.
func InspectPods(seen PodsSeen) Verification {
	pods := slices.Clone(seen.Pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	v := Verification{Read: true, Healthy: true, Progressed: ProgressOf(pods, seen.Hash)}
	for i := range pods {
		p := &pods[i]
		if !OfRevision(p, seen.Hash) || slices.Contains(seen.NodesNotReady, p.Spec.NodeName) {
			continue
		}
		if problem := podProblem(p, seen); problem != "" && v.Problem == "" {
			v.Problem = "pod " + p.Name + ": " + problem
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue // replaced by its controller: its replacement's health counts
		}
		since, ready := healthySince(p)
		v.Healthy = v.Healthy && ready
		v.Pods++
		if ready && (v.FirstHealthySince.IsZero() || since.Before(v.FirstHealthySince)) {
			v.FirstHealthySince = since
		}
		if seen.Rule == RuleLasting {
			v.Outlast = max(v.Outlast, outlast(longestRun(p)))
		}
		if since.After(v.HealthySince) {
			v.HealthySince = since
		}
		if seen.Rule != RuleRolling && seen.Rule != RuleVerifying {
			continue
		}
		judgeAt := readyBy(p)
		if since, lost := unready(p, seen); lost {
			judgeAt = relapseJudgedAt(p, since)
		}
		for _, at := range []time.Time{judgeAt, mountBy(p, seen)} {
			if !at.IsZero() && (v.JudgeAt.IsZero() || at.Before(v.JudgeAt)) {
				v.JudgeAt = at
			}
		}
	}
	return v
}

// ProgressOf is the last progress of a rollout to revision hash that a
// workload's own pods show: a pod of the revision made or Ready, or one of
// another revision being deleted (zero: none). Every change of a workload's
// rollout status follows one of these, so it survives what a process's
// memory does not: a restart, a new leader.
func ProgressOf(pods []corev1.Pod, hash string) time.Time {
	var at time.Time
	for i := range pods {
		p := &pods[i]
		switch {
		case OfRevision(p, hash):
			at = later(at, p.CreationTimestamp.Time)
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					at = later(at, c.LastTransitionTime.Time)
				}
			}
		case p.DeletionTimestamp != nil: // it ends at deletionTimestamp, its grace period after the delete
			at = later(at, p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0))*time.Second))
		}
	}
	return at
}

// OwnPods are the pods whose controller is owner, or one of owner's
// ReplicaSets (named after owner and the pod's pod-template-hash, as the
// Deployment controller and Argo Rollouts name them): another workload whose
// template has the same labels, and references the same data, is not owner.
// The pods of a rollout are read by the template's labels, then these.
func OwnPods(owner metav1.Object, pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		c := metav1.GetControllerOf(&p)
		switch {
		case c == nil:
		case c.Kind == "ReplicaSet" && c.Name == owner.GetName()+"-"+p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]:
			out = append(out, p)
		case c.UID == owner.GetUID():
			out = append(out, p)
		}
	}
	return out
}

// OfRevision reports whether p, one of a workload's own pods (OwnPods), is
// of its revision stamped hash (the template's stamp, copied to every pod
// made from it) and not being deleted: the pods InspectPods judges, and a
// canary's pods while it is held at one new pod.
func OfRevision(p *corev1.Pod, hash string) bool {
	return p.Annotations[stamp.AnnotationHash] == hash && p.DeletionTimestamp == nil
}

func podProblem(p *corev1.Pod, seen PodsSeen) string {
	if seen.Rule == RuleLasting || byTheNode(p) {
		// A halted failure's pods are judged by how long they have been
		// healthy (InspectPods); a pod the node ended is replaced, and its
		// replacement judged.
		return ""
	}
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
	if seen.Rule != RuleRolling && seen.Rule != RuleVerifying || restartedByTheNode(p) {
		return ""
	}
	if problem := volumeProblem(p, seen); problem != "" {
		return problem
	}
	if since, lost := unready(p, seen); lost {
		// Ready once since its containers started, and not now, or not
		// Ready although it was when the window began: the config it runs
		// with made it unready (its node's loss leaves ContainersReady as
		// it was) — once that lasted past a probe the kubelet makes again
		// (relapseJudgedAt).
		if seen.Now.Before(relapseJudgedAt(p, since)) {
			return ""
		}
		return fmt.Sprintf("lost its readiness at %s (%s)", since.UTC().Format(time.RFC3339), readyReason(p))
	}
	if at := readyBy(p); !at.IsZero() && !seen.Now.Before(at) {
		return fmt.Sprintf("never became ready: its containers run since %s, longer than its probes allow (%s)",
			lastStart(p).UTC().Format(time.RFC3339), readyReason(p))
	}
	return ""
}

// byTheNode reports whether the node, not p's own containers, ended p: a
// failed pod with one of the notTheConfig reasons (the kubelet leaves its
// containers terminated with 137 or ContainerStatusUnknown).
func byTheNode(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed && slices.Contains(notTheConfig, p.Status.Reason)
}

// restartedByTheNode reports whether a container of p was last restarted
// by its node (reason Unknown: a reboot): its readiness since says nothing
// of the config; a container that never becomes Ready again is still
// judged by its probes' budget from its new start.
func restartedByTheNode(p *corev1.Pod) bool {
	for _, cs := range allStatuses(p) {
		if t := cs.LastTerminationState.Terminated; endedByTheNode(t) && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// runtimeInterrupted are what the container runtime's error says when its
// own call to start a container was cut short (the kubelet killed or
// restarted mid-start, containerd restarting), not the process failing to
// start with what it was given (an exec error, a mount the config broke).
var runtimeInterrupted = []string{"context canceled", "context deadline exceeded", "transport is closing",
	"connection refused", "ttrpc: closed"}

// endedByTheNode reports whether a container's end was its node's: reason
// Unknown (the node or its runtime restarted and the end was not seen), or
// a StartError whose message is the runtime's own call interrupted
// (runtimeInterrupted). Such an end fails no rollout; the restarted
// container is judged on its own.
func endedByTheNode(t *corev1.ContainerStateTerminated) bool {
	if t == nil {
		return false
	}
	if t.Reason == "Unknown" {
		return true
	}
	return t.Reason == "StartError" && slices.ContainsFunc(runtimeInterrupted, func(s string) bool { return strings.Contains(t.Message, s) })
}

// allStatuses are the statuses of p's init containers and containers.
func allStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
}

// containerProblem: since the rollout started (or in a pod made since), a
// restart, an exit (an init container's exit 0 is its success), or a waiting
// reason of a container that cannot run. An end the node caused
// (endedByTheNode) is not the config's.
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
	case cs.RestartCount > 0 && recent(last) && !endedByTheNode(last):
		return fmt.Sprintf("container %s restarted %d times%s%s", cs.Name, cs.RestartCount, exitOf(last), waiting)
	case t != nil && (t.ExitCode != 0 || !init) && recent(t) && !endedByTheNode(t):
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

// unready reports whether p, Ready once, is not ready now, and since when:
// it lost its readiness after its containers started, or (RuleVerifying)
// it is not Ready although it was when the window began.
func unready(p *corev1.Pod, seen PodsSeen) (time.Time, bool) {
	ready, since := containersReady(p)
	if ready {
		return since, false
	}
	return since, lostReadiness(p, since) || seen.Rule == RuleVerifying && !seen.From.IsZero() && existedAt(p, seen.From, since)
}

// relapseMargin is how long past its readiness probe's period a pod that
// lost its readiness may stay not ready before it fails its rollout
// (relapseJudgedAt).
const relapseMargin = 5 * time.Second

// relapseJudgedAt is when p, not ready since since after it was Ready, is
// judged: one period of its readiness probe (the kubelet's default 10 s)
// and relapseMargin later. A restarted kubelet forgets every probe's result
// and reports its pods not ready until their next probe passes, within
// one period; an app the config makes unready stays so longer.
func relapseJudgedAt(p *corev1.Pod, since time.Time) time.Time {
	var period time.Duration
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.ReadinessProbe != nil {
			period = max(period, time.Duration(cmp.Or(c.ReadinessProbe.PeriodSeconds, 10))*time.Second)
		}
	}
	return since.Add(period + relapseMargin)
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
	return lostReadiness(p, since)
}

// lostReadiness reports whether p, whose containers are not ready since
// since, was Ready in between: every container runs, and started before
// its readiness last changed (a pod still starting has been not ready since
// before they ran).
func lostReadiness(p *corev1.Pod, since time.Time) bool {
	running := longRunning(p)
	for _, cs := range running {
		if r := cs.State.Running; r == nil || !since.After(r.StartedAt.Time) {
			return false
		}
	}
	return len(running) > 0
}

// longRunning are the statuses of the containers whose readiness makes
// p's: its containers and its sidecars (init containers with restartPolicy
// Always, which ContainersReady counts too).
func longRunning(p *corev1.Pod) []corev1.ContainerStatus {
	out := slices.Clone(p.Status.ContainerStatuses)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, cs := range p.Status.InitContainerStatuses {
			if cs.Name == c.Name {
				out = append(out, cs)
			}
		}
	}
	return out
}

// containersReady reads the pod's ContainersReady condition: what its
// containers' probes say (PodReady also turns False when its node is lost).
// A node that reports no ContainersReady (some virtual kubelets report
// Ready only) is read by its Ready condition.
func containersReady(p *corev1.Pod) (bool, time.Time) {
	var ready *corev1.PodCondition
	for i, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.ContainersReady:
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		case corev1.PodReady:
			ready = &p.Status.Conditions[i]
		}
	}
	if ready != nil {
		return ready.Status == corev1.ConditionTrue, ready.LastTransitionTime.Time
	}
	return false, p.CreationTimestamp.Time
}

// gatesTrue reports whether every readiness gate of p's spec has its
// condition True (a load balancer's health, a mesh's), and since when the
// last of them turned so (zero: p has none). Kubernetes counts a pod Ready,
// and its workload's controller counts it available, only then: a canary
// whose new pod's gate never turns True has not passed. The pod's Ready
// condition itself is not read, since the node lifecycle controller turns
// it False on a NotReady node whatever the config did.
func gatesTrue(p *corev1.Pod) (bool, time.Time) {
	var since time.Time
	for _, g := range p.Spec.ReadinessGates {
		i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == g.ConditionType })
		if i < 0 || p.Status.Conditions[i].Status != corev1.ConditionTrue {
			return false, time.Time{}
		}
		since = later(since, p.Status.Conditions[i].LastTransitionTime.Time)
	}
	return true, since
}

// healthySince: whether p's containers are Ready and its readiness gates
// True (gatesTrue), and since when they have been Ready with no restart as their node reports it: from their last
// readiness change or restart, and never before the node last wrote p's
// container statuses (statusWritten). A busy node's kubelet writes late (23 s
// after a crash on this project's real-node tests): the Ready it wrote at W
// says nothing of the time before W, when a crash it had not written yet
// would look like health. Counted from W, a crash the node writes within a
// window of its previous write is seen before the health lasted.
func healthySince(p *corev1.Pod) (time.Time, bool) {
	ready, since := containersReady(p)
	if !ready {
		return time.Time{}, false
	}
	gated, at := gatesTrue(p)
	if !gated {
		return time.Time{}, false
	}
	since = later(since, at)
	for _, cs := range longRunning(p) {
		if t := cs.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(since) {
			since = t.FinishedAt.Time
		}
	}
	return later(since, statusWritten(p)), true
}

// statusWritten is when p's container statuses were last written (zero
// when not known): the time of the newest managedFields entry of the status
// subresource that holds them, the node's kubelet (or kwok, or a virtual
// kubelet). The API server sets it only on a write that changed a field, so
// a pod whose health stands still keeps it; another writer of the pod's
// status (a readiness gate's controller) is not counted, so its writes do
// not put a halt's lift off.
func statusWritten(p *corev1.Pod) time.Time {
	var at time.Time
	for _, e := range p.ManagedFields {
		if e.Subresource != "status" || e.Time == nil || e.FieldsV1 == nil || !bytes.Contains(e.FieldsV1.GetRawBytes(), []byte(`"f:containerStatuses"`)) {
			continue
		}
		at = later(at, e.Time.Time)
	}
	return at
}

// outlast is how long a pod whose container ran at most run before its last
// restart must stay healthy to count as recovered (0: it never restarted,
// or ran less than the second its start and end are written in):
// its next crash comes within run of its restart, and the node may write
// it up to workload.LateReadyMargin later (a crash 20 s after each start,
// written 20 s late, lifted a halt when this was twice the run: ci27's
// real-node lane); and at least twice run.
func outlast(run time.Duration) time.Duration {
	if run <= 0 {
		return 0
	}
	return max(2*run, run+workload.LateReadyMargin)
}

// longestRun is how long the longest-running container of p ran before
// its last restart (0: none restarted).
func longestRun(p *corev1.Pod) time.Duration {
	var longest time.Duration
	for _, cs := range longRunning(p) {
		if t := cs.LastTerminationState.Terminated; t != nil && !t.StartedAt.IsZero() && t.FinishedAt.After(t.StartedAt.Time) {
			longest = max(longest, t.FinishedAt.Sub(t.StartedAt.Time))
		}
	}
	return longest
}

// lastStart is when p's last container started (zero unless all run).
func lastStart(p *corev1.Pod) time.Time {
	var last time.Time
	for _, cs := range longRunning(p) {
		r := cs.State.Running
		if r == nil {
			return time.Time{}
		}
		if r.StartedAt.After(last) {
			last = r.StartedAt.Time
		}
	}
	return last
}

// readyBy is when p, whose containers all run but that was never Ready
// since they started, has had twice its probes' budget and readyMargin (zero
// when it is Ready, has been, or not all its containers run).
func readyBy(p *corev1.Pod) time.Time {
	ready, since := containersReady(p)
	start := lastStart(p)
	if ready || start.IsZero() || lostReadiness(p, since) {
		return time.Time{}
	}
	var budget time.Duration
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		budget = max(budget, ProbeBudget(c.StartupProbe)+ProbeBudget(c.ReadinessProbe))
	}
	return start.Add(2*budget + readyMargin)
}

// ProbeBudget is how long a probe may fail before the kubelet gives up on
// it: initialDelaySeconds + periodSeconds × failureThreshold, with the
// kubelet's defaults (period 10 s, threshold 3). 0 without a probe.
func ProbeBudget(p *corev1.Probe) time.Duration {
	if p == nil {
		return 0
	}
	period, threshold := p.PeriodSeconds, p.FailureThreshold
	if period <= 0 {
		period = 10
	}
	if threshold <= 0 {
		threshold = 3
	}
	return time.Duration(p.InitialDelaySeconds+period*threshold) * time.Second
}

func readyReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Reason != "" {
			return c.Reason
		}
	}
	return "containers not ready"
}
