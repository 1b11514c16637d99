package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		"a failed pod":                            {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" })}, "pod a: failed (Evicted"},
		"an init container that failed is named":  {[]corev1.Pod{pod("a", "v1-new", after, false, func(p *corev1.Pod) { initDone(p); p.Status.InitContainerStatuses[0].State.Terminated.ExitCode = 2 })}, "container init exited (exit code 2"},
		"no pods (scaled to zero) is nothing bad": {nil, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := InspectPods(PodsSeen{Pods: tc.pods, Hash: "v1-new", Started: started, From: from})
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("InspectPods = %q, want %q", got, tc.want)
			}
		})
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
	if got := EffectiveWindow(d, 30*time.Second); got != 20*time.Second {
		t.Fatalf("EffectiveWindow = %v, want 20s", got)
	}
	d.Spec.MinReadySeconds = 60
	if got := EffectiveWindow(d, 30*time.Second); got != 0 {
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
