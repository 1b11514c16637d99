package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/stamp"
)

func TestInspectPods(t *testing.T) {
	started := t0
	from := t0.Add(time.Minute)
	pod := func(name, hash string, created time.Time, ready bool, mutate ...func(*corev1.Pod)) corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created),
				Annotations: map[string]string{stamp.AnnotationHash: hash}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: status, Reason: "ContainersNotReady", LastTransitionTime: metav1.NewTime(from.Add(5 * time.Second))},
					{Type: corev1.ContainersReady, Status: status, Reason: "ContainersNotReady", LastTransitionTime: metav1.NewTime(from.Add(5 * time.Second))}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: ready}}},
		}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	crashedAt := func(at time.Time) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 2
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.NewTime(at)}
			p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		}
	}
	restarted := crashedAt(from.Add(2 * time.Second))
	exited := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", FinishedAt: metav1.NewTime(from.Add(time.Second))}
	}
	initDone := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}
	}
	nodeLost := func(p *corev1.Pod) {
		p.Status.Conditions[0].Status, p.Status.Conditions[0].Reason = corev1.ConditionFalse, "NodeNotReady"
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: from} }
	// running: the container runs since at (the pod's readiness changed at from+5s).
	running := func(at time.Time) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}
		}
	}
	before, after := from.Add(-10*time.Second), from.Add(10*time.Second)
	old := started.Add(-time.Hour) // a pod of a revision a revert brings back
	tests := map[string]struct {
		pods []corev1.Pod
		want string // "" healthy, else a substring of the problem
	}{
		"all ready":                                   {[]corev1.Pod{pod("a", "v1-new", before, true), pod("b", "v1-new", before, true, initDone)}, ""},
		"restarted, in CrashLoopBackOff":              {[]corev1.Pod{pod("a", "v1-new", before, true), pod("b", "v1-new", before, true, restarted)}, "pod b: container app restarted 2 times (exit code 1, Error), CrashLoopBackOff"},
		"exited, not restarted yet":                   {[]corev1.Pod{pod("a", "v1-new", before, false, exited)}, "pod a: container app exited (exit code 3, Error), restarted 0 times"},
		"lost readiness":                              {[]corev1.Pod{pod("a", "v1-new", before, false)}, "pod a: lost its readiness"},
		"made in the second verifying began, lost it": {[]corev1.Pod{pod("a", "v1-new", from, false, running(from))}, "pod a: lost its readiness"},
		"made in that second, still starting":         {[]corev1.Pod{pod("a", "v1-new", from, false, running(from.Add(6*time.Second)))}, ""},
		"its node lost: no failure of the config":     {[]corev1.Pod{pod("a", "v1-new", before, true, nodeLost)}, ""},
		"a new pod not ready yet is no failure":       {[]corev1.Pod{pod("a", "v1-new", after, false)}, ""},
		"a new pod that crashes is":                   {[]corev1.Pod{pod("a", "v1-new", after, false, restarted)}, "pod a: container app restarted"},
		"old revision's pods do not count":            {[]corev1.Pod{pod("a", "v1-old", before, false, restarted)}, ""},
		"pods being deleted do not count":             {[]corev1.Pod{pod("a", "v1-new", before, false, exited, deleting)}, ""},
		"the first problem by pod name is named":      {[]corev1.Pod{pod("z", "v1-new", before, false, exited), pod("c", "v1-new", before, false)}, "pod c: lost"},
		"a revert's pod: restarts before the start":   {[]corev1.Pod{pod("a", "v1-new", old, true, crashedAt(old.Add(time.Minute)))}, ""},
		"a revert's pod: a restart since the start":   {[]corev1.Pod{pod("a", "v1-new", old, true, crashedAt(started.Add(time.Second)))}, "pod a: container app restarted"},
		"a revert's pod that failed long ago":         {[]corev1.Pod{pod("a", "v1-new", old, false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, nodeLost)}, ""},
		"a container that cannot be created": {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `couldn't find key x in ConfigMap ns/c`}
		})}, "CreateContainerConfigError: couldn't find key x"},
		"a failed pod": {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { p.Status.Phase, p.Status.Message = corev1.PodFailed, "containers exited" })}, "pod a: failed (: containers exited"},
		"an evicted pod is the node's, not the config's": {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" })}, ""},
		"a node shutdown's pod is not the config's":      {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Terminated" })}, ""},
		"a restart the node caused (reason Unknown)": {[]corev1.Pod{pod("a", "v1-new", before, true, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 1
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Unknown", FinishedAt: metav1.NewTime(from)}
		})}, ""},
		"an init container that failed is named":  {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { initDone(p); p.Status.InitContainerStatuses[0].State.Terminated.ExitCode = 2 })}, "container init exited (exit code 2"},
		"no pods (scaled to zero) is nothing bad": {nil, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := InspectPods(PodsSeen{Rule: RuleVerifying, Pods: tc.pods, Hash: "v1-new", Started: started, From: from, Now: from.Add(time.Minute)}).Problem
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("InspectPods = %q, want %q", got, tc.want)
			}
		})
	}
}

// A restarted kubelet reports its pods not ready until their next probe
// passes: a pod that lost its readiness is judged one period of its
// readiness probe and relapseMargin later, not at once, and looked at again
// then (JudgeAt).
func TestLostReadinessIsJudgedAfterAProbe(t *testing.T) {
	lost := t0.Add(time.Minute)
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{stamp.AnnotationHash: "v1-new"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", ReadinessProbe: &corev1.Probe{PeriodSeconds: 2}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: metav1.NewTime(lost)}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}}},
	}
	judged := lost.Add(2*time.Second + relapseMargin)
	for _, rule := range []Rule{RuleRolling, RuleVerifying} {
		seen := PodsSeen{Rule: rule, Pods: []corev1.Pod{p}, Hash: "v1-new", Started: t0, From: t0, Now: lost.Add(time.Second)}
		if v := InspectPods(seen); v.Problem != "" || !v.JudgeAt.Equal(judged) {
			t.Errorf("%v, a second after it lost its readiness: problem %q, judged at %v; want none yet, judged at %v", rule, v.Problem, v.JudgeAt, judged)
		}
		seen.Now = judged
		if v := InspectPods(seen); !strings.Contains(v.Problem, "lost its readiness") {
			t.Errorf("%v, still not ready a period and a margin later: problem %q, want it lost its readiness", rule, v.Problem)
		}
	}
}

func TestVerifyWindow(t *testing.T) {
	tests := map[string]struct {
		value   *string
		want    time.Duration
		problem bool
	}{
		"absent: the default":   {nil, 30 * time.Second, false},
		"set":                   {ptrTo("45s"), 45 * time.Second, false},
		"zero turns it off":     {ptrTo("0s"), 0, false},
		"malformed":             {ptrTo("soon"), 30 * time.Second, true},
		"negative":              {ptrTo("-1s"), 30 * time.Second, true},
		"capped: holds no slot": {ptrTo("100h"), MaxVerifyWindow, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := map[string]string{}
			if tc.value != nil {
				a[AnnotationVerifyWindow] = *tc.value
			}
			got, p := VerifyWindow(a, 30*time.Second)
			if got != tc.want || (p != nil) != tc.problem {
				t.Fatalf("VerifyWindow = %v, %v; want %v, problem %v", got, p, tc.want, tc.problem)
			}
		})
	}
}

func TestEffectiveWindowCountsMinReadySeconds(t *testing.T) {
	d := deployment(1, 1, appsv1.DeploymentStatus{}, func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 10 })
	if got := EffectiveWindow(builtin(d), d, 30*time.Second); got != 20*time.Second {
		t.Fatalf("EffectiveWindow = %v, want 20s", got)
	}
	d.Spec.MinReadySeconds = 60
	if got := EffectiveWindow(builtin(d), d, 30*time.Second); got != 0 {
		t.Fatalf("EffectiveWindow = %v, want 0 (minReadySeconds covers it)", got)
	}
}

func ptrTo(s string) *string { return &s }

func TestOnFailure(t *testing.T) {
	tests := map[string]struct {
		workload, namespace map[string]string
		def                 bool
		want                bool
		problems            int
	}{
		"default halt":                      {nil, nil, false, false, 0},
		"default undo (--on-failure=undo)":  {nil, nil, true, true, 0},
		"workload asks":                     {map[string]string{AnnotationOnFailure: "undo"}, nil, false, true, 0},
		"namespace asks":                    {nil, map[string]string{AnnotationOnFailure: "undo"}, false, true, 0},
		"workload's halt wins":              {map[string]string{AnnotationOnFailure: "halt"}, map[string]string{AnnotationOnFailure: "undo"}, true, false, 0},
		"bad workload value: the namespace": {map[string]string{AnnotationOnFailure: "rollback"}, map[string]string{AnnotationOnFailure: "undo"}, false, true, 1},
		"bad values: the default":           {map[string]string{AnnotationOnFailure: "yes"}, map[string]string{AnnotationOnFailure: "1"}, false, false, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, problems := OnFailure(tc.workload, tc.namespace, tc.def)
			if got != tc.want || len(problems) != tc.problems {
				t.Fatalf("OnFailure = %v, %v; want %v with %d problems", got, problems, tc.want, tc.problems)
			}
		})
	}
}

// The rules by which a revision's pods are judged, from the moment they
// exist (RuleRolling) to a halt that lifts only on health that lasts
// (RuleLasting).
func TestInspectPodsByRule(t *testing.T) {
	started := t0
	now := t0.Add(2 * time.Minute)
	base := func(name string, mutate ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(started.Add(time.Second)),
				Annotations: map[string]string{stamp.AnnotationHash: "v1-new"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: metav1.NewTime(started.Add(time.Second))}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
		}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	runningSince := func(at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}
		}
	}
	readyAt := func(at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions[0].Status, p.Status.Conditions[0].LastTransitionTime = corev1.ConditionTrue, metav1.NewTime(at)
			p.Status.ContainerStatuses[0].Ready = true
		}
	}
	unreadyAt := func(at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions[0].Status, p.Status.Conditions[0].LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(at)
		}
	}
	probe := func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 2, FailureThreshold: 3} // a budget of 6 s
	}
	restartedAt := func(at time.Time, n int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = n
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.NewTime(at)}
		}
	}
	// writtenBy: manager wrote p's status (fields) at at, as the API
	// server records it in managedFields.
	writtenBy := func(manager, fields string, at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
				Subresource: "status", Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)})
		}
	}
	const kubeletFields = `{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:phase":{}}}`
	configError := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `couldn't find key mode in ConfigMap ns/shared`}
	}
	initFailing := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "check", RestartCount: 1,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: metav1.NewTime(started.Add(3 * time.Second))}},
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
	}
	startError := func(message string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
				Message: message, FinishedAt: metav1.NewTime(started.Add(5 * time.Second))}}
		}
	}
	tests := map[string]struct {
		rule    Rule
		pod     corev1.Pod
		problem string // "" none, else a substring
		healthy bool
		since   time.Time // HealthySince, when healthy
		judgeAt time.Time
		outlast time.Duration
	}{
		// A crash 20 s after each start: the next comes 20 s after this
		// restart, and a busy node wrote one 20 s late (ci27): health must
		// outlast the run by LateReadyMargin. Twice the run lifted that halt.
		"lasting: a crash loop's runs set how long health must last": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-5*time.Second)), readyAt(now.Add(-4*time.Second)), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 2
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				StartedAt: metav1.NewTime(now.Add(-26 * time.Second)), FinishedAt: metav1.NewTime(now.Add(-6 * time.Second))}
		}), healthy: true, since: now.Add(-4 * time.Second), outlast: 80 * time.Second},
		"lasting: a long run between crashes sets twice itself": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-5*time.Second)), readyAt(now.Add(-4*time.Second)), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 1
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				StartedAt: metav1.NewTime(now.Add(-126 * time.Second)), FinishedAt: metav1.NewTime(now.Add(-6 * time.Second))}
		}), healthy: true, since: now.Add(-4 * time.Second), outlast: 240 * time.Second},
		"rolling: a key removed (CreateContainerConfigError)": {rule: RuleRolling, pod: base("a", configError), problem: "cannot run, CreateContainerConfigError: couldn't find key mode"},
		"rolling: an init container rejects the value":        {rule: RuleRolling, pod: base("a", initFailing), problem: "container check restarted 1 times (exit code 2, Error), CrashLoopBackOff"},
		"rolling: starting within its probes' budget":         {rule: RuleRolling, pod: base("a", probe, runningSince(now.Add(-10*time.Second))), judgeAt: now.Add(-10*time.Second + 12*time.Second + readyMargin)},
		"rolling: never ready past its probes' budget":        {rule: RuleRolling, pod: base("a", probe, runningSince(started.Add(2*time.Second))), problem: "never became ready"},
		"rolling: Ready, then lost it (a flapping probe)":     {rule: RuleRolling, pod: base("a", runningSince(started.Add(2*time.Second)), unreadyAt(started.Add(20*time.Second))), problem: "lost its readiness"},
		"rolling: Ready": {rule: RuleRolling, pod: base("a", runningSince(started.Add(2*time.Second)), readyAt(started.Add(3*time.Second))), healthy: true, since: started.Add(3 * time.Second)},
		"crashing: a lost readiness decides nothing": {rule: RuleCrashing, pod: base("a", runningSince(started.Add(2*time.Second)), unreadyAt(started.Add(20*time.Second)))},
		"crashing: a crash does":                     {rule: RuleCrashing, pod: base("a", runningSince(now), restartedAt(now.Add(-time.Second), 1)), problem: "restarted 1 times"},
		"lasting: Ready since a restart inside the window, healthy only since": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-5*time.Second)), readyAt(now.Add(-4*time.Second)), restartedAt(now.Add(-6*time.Second), 3)),
			healthy: true, since: now.Add(-4 * time.Second)},
		"lasting: an evicted pod is passed over": {rule: RuleLasting, pod: base("a", func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" }),
			healthy: true},
		"rolling: an evicted pod whose container the kubelet ended is the node's": {rule: RuleRolling, pod: base("a", restartedAt(now.Add(-time.Second), 1), func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
			p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown", FinishedAt: metav1.NewTime(now)}
		}), healthy: true},
		"rolling: no ContainersReady (a virtual kubelet): Ready decides": {rule: RuleRolling, pod: base("a", runningSince(started.Add(2*time.Second)), func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(started.Add(3 * time.Second))}}
		}), healthy: true, since: started.Add(3 * time.Second)},
		"rolling: a sidecar still within its probes' budget": {rule: RuleRolling, pod: base("a", runningSince(now.Add(-50*time.Second)), func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always, StartupProbe: &corev1.Probe{InitialDelaySeconds: 60, PeriodSeconds: 10, FailureThreshold: 3}}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-50 * time.Second))}}}}
		}), judgeAt: now.Add(-50*time.Second + 2*90*time.Second + readyMargin)},
		"rolling: a start the kubelet's restart cut short is the node's (StartError, context canceled)": {rule: RuleRolling, pod: base("a", startError(`failed to start containerd task "aaa6d3": context canceled: unknown`))},
		"rolling: restarted after a start the runtime cut short, Ready": {rule: RuleRolling, pod: base("a", runningSince(now.Add(-5*time.Second)), readyAt(now.Add(-4*time.Second)), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 1
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
				Message: `failed to start containerd task "aaa6d3": context canceled: unknown`, FinishedAt: metav1.NewTime(now.Add(-6 * time.Second))}
		}), healthy: true, since: now.Add(-4 * time.Second)},
		"rolling: a start the config broke (StartError, exec) is the config's": {rule: RuleRolling,
			pod:     base("a", startError(`failed to create containerd task: OCI runtime create failed: exec: "/scripts/run.sh": permission denied: unknown`)),
			problem: "container app exited (exit code 128, StartError)"},
		// A busy node's kubelet wrote a Ready of 40 s ago only 20 s ago:
		// the health it proves starts then (t7: the crash it had not
		// written yet lifted a halt).
		"lasting: a Ready the kubelet wrote late counts from its write": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-41*time.Second)), readyAt(now.Add(-40*time.Second)),
			writtenBy("kubelet", kubeletFields, now.Add(-20*time.Second))), healthy: true, since: now.Add(-20 * time.Second)},
		"rolling: a canary's Ready the kubelet wrote late counts from its write": {rule: RuleRolling, pod: base("a", runningSince(now.Add(-41*time.Second)), readyAt(now.Add(-40*time.Second)),
			writtenBy("kubelet", `{"f:status":{"f:podIP":{}}}`, now.Add(-50*time.Second)), writtenBy("kubelet", kubeletFields, now.Add(-20*time.Second))),
			healthy: true, since: now.Add(-20 * time.Second)},
		"lasting: a write before the Ready changes nothing": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-41*time.Second)), readyAt(now.Add(-40*time.Second)),
			writtenBy("kubelet", kubeletFields, now.Add(-40*time.Second))), healthy: true, since: now.Add(-40 * time.Second)},
		"lasting: a readiness gate's controller writing its condition later is not the node": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-41*time.Second)), readyAt(now.Add(-40*time.Second)),
			writtenBy("kubelet", kubeletFields, now.Add(-39*time.Second)), writtenBy("gate-controller", `{"f:status":{"f:conditions":{"k:{\"type\":\"example.com/gate\"}":{}}}}`, now.Add(-5*time.Second))),
			healthy: true, since: now.Add(-39 * time.Second)},
		"lasting: Ready for a while, restarts long ago are history": {rule: RuleLasting, pod: base("a", runningSince(now.Add(-50*time.Second)), readyAt(now.Add(-45*time.Second)), restartedAt(now.Add(-51*time.Second), 3)),
			healthy: true, since: now.Add(-45 * time.Second)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			seen := PodsSeen{Rule: tc.rule, Pods: []corev1.Pod{tc.pod}, Hash: "v1-new", Started: started, Now: now}
			if tc.rule == RuleLasting {
				seen.Started = now.Add(-30 * time.Second)
			}
			v := InspectPods(seen)
			if (tc.problem == "") != (v.Problem == "") || !strings.Contains(v.Problem, tc.problem) {
				t.Fatalf("problem %q, want %q", v.Problem, tc.problem)
			}
			if tc.outlast != 0 && v.Outlast != tc.outlast {
				t.Errorf("outlast %v, want %v", v.Outlast, tc.outlast)
			}
			if tc.problem == "" && (v.Healthy != tc.healthy || (tc.healthy && !v.HealthySince.Equal(tc.since))) {
				t.Errorf("healthy %v since %v, want %v since %v", v.Healthy, v.HealthySince, tc.healthy, tc.since)
			}
			if tc.problem == "" && !v.JudgeAt.Equal(tc.judgeAt) {
				t.Errorf("judged at %v, want %v", v.JudgeAt, tc.judgeAt)
			}
		})
	}
}

func TestEffectiveWindowKeepsAStatefulSetsWindow(t *testing.T) {
	s := statefulSet(1, 1, rollingSTS, appsv1.StatefulSetStatus{})
	s.Spec.MinReadySeconds = 10
	if got := EffectiveWindow(builtin(s), s, 30*time.Second); got != 30*time.Second {
		t.Fatalf("EffectiveWindow = %v, want 30s: a StatefulSet is complete on ReadyReplicas, which minReadySeconds does not delay", got)
	}
}

func TestWatched(t *testing.T) {
	tests := map[string]struct {
		rec               Record
		complete, ongoing bool
		rule              Rule
		watched           bool
	}{
		"rolling":                           {Record{State: Rolling}, false, false, RuleRolling, true},
		"verifying":                         {Record{State: Verifying}, true, false, RuleVerifying, true},
		"failed, halting, complete":         {Record{State: Failed, Halted: "x"}, true, false, RuleLasting, true},
		"failed, halting, not complete":     {Record{State: Failed, Halted: "x"}, false, false, 0, false},
		"failed, not halting":               {Record{State: Failed}, true, false, 0, false},
		"completed, its change rolls on":    {Record{State: Completed}, true, true, RuleCrashing, true},
		"completed, its change reached all": {Record{State: Completed}, true, false, 0, false},
		"no record":                         {Record{}, true, true, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rule, watched := Watched(tc.rec, tc.complete, tc.ongoing)
			if rule != tc.rule || watched != tc.watched {
				t.Fatalf("Watched = %v, %v; want %v, %v", rule, watched, tc.rule, tc.watched)
			}
		})
	}
}

// TestOwnPods: the pods of a workload are its controller's, not those of
// another workload whose template has the same labels (a canary beside its
// main Deployment, both mounting the same ConfigMap, carry the same stamp).
func TestOwnPods(t *testing.T) {
	owned := func(name, kind, owner, hash string, uid string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: owner, UID: types.UID(uid), Controller: ptr.To(true)}}}}
	}
	pods := []corev1.Pod{
		owned("web-abc-1", "ReplicaSet", "web-abc", "abc", "rs1"),
		owned("web-canary-abc-1", "ReplicaSet", "web-canary-abc", "abc", "rs2"),
		owned("db-0", "StatefulSet", "db", "", "sts-uid"),
		{ObjectMeta: metav1.ObjectMeta{Name: "bare"}},
	}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "web-uid"}}
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "sts-uid"}}
	names := func(ps []corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(OwnPods(web, pods)); !slices.Equal(got, []string{"web-abc-1"}) {
		t.Errorf("web's pods: %v", got)
	}
	if got := names(OwnPods(db, pods)); !slices.Equal(got, []string{"db-0"}) {
		t.Errorf("db's pods: %v", got)
	}
}

// A pod with readiness gates (a load balancer's health) is healthy only
// once every gate's condition is True, and from when the last turned so:
// Kubernetes counts it Ready, and its controller available, only then. A
// canary whose new pod's gate is never set has not passed, however long
// its containers are Ready; broken on purpose (gates not read), it passed.
func TestReadinessGatesCountForHealth(t *testing.T) {
	ready := t0.Add(5 * time.Second)
	gated := func(gate corev1.ConditionStatus, at time.Time) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{stamp.AnnotationHash: "v1-new"}},
			Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(ready)},
					{Type: corev1.PodReady, Status: gate, LastTransitionTime: metav1.NewTime(at)}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}}},
		}
		if gate != "" {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "example.com/lb-ready", Status: gate, LastTransitionTime: metav1.NewTime(at)})
		}
		return p
	}
	seen := func(p corev1.Pod) Verification {
		return InspectPods(PodsSeen{Rule: RuleRolling, Pods: []corev1.Pod{p}, Hash: "v1-new", Started: t0, Now: t0.Add(10 * time.Minute)})
	}
	for name, p := range map[string]corev1.Pod{"gate never set": gated("", time.Time{}), "gate False": gated(corev1.ConditionFalse, ready)} {
		v := seen(p)
		if _, ok := CanaryJudgedUntil(v, 30*time.Second); ok || v.Healthy || v.Problem != "" {
			t.Errorf("%s: %+v; want not healthy, no canary pass, and no failure of the config", name, v)
		}
	}
	at := t0.Add(40 * time.Second)
	v := seen(gated(corev1.ConditionTrue, at))
	if until, ok := CanaryJudgedUntil(v, 30*time.Second); !ok || !v.Healthy || !until.Equal(at.Add(30*time.Second)) {
		t.Errorf("gate True at +40 s: %+v, passes at %v (%v); want healthy from the gate's turn, passing at %v", v, until, ok, at.Add(30*time.Second))
	}
}

// ProgressOf is the newest of: a pod of the revision made, a pod of it
// Ready, a pod of another revision deleted (its grace period deducted).
// Another revision's running pod, and a Ready condition that is False, are
// no progress.
func TestProgressOf(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	pod := func(name, hash string, made int) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(made), Annotations: map[string]string{stamp.AnnotationHash: hash}}}
	}
	made := pod("made", "v2", 10)
	ready := pod("ready", "v2", 5)
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at(20)}}
	unready := pod("unready", "v2", 5)
	unready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at(90)}}
	old := pod("old", "v1", 0)
	deleting := pod("deleting", "v1", 0)
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = ptr.To(at(60)), ptr.To[int64](30)

	for _, tc := range []struct {
		pods []corev1.Pod
		want time.Time
	}{
		{nil, time.Time{}},
		{[]corev1.Pod{old}, time.Time{}},
		{[]corev1.Pod{old, made, unready}, at(10).Time},
		{[]corev1.Pod{made, ready}, at(20).Time},
		{[]corev1.Pod{made, ready, deleting}, at(30).Time},
	} {
		if got := ProgressOf(tc.pods, "v2"); !got.Equal(tc.want) {
			t.Errorf("ProgressOf(%d pods) = %v, want %v", len(tc.pods), got, tc.want)
		}
	}
}
