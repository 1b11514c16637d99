package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	cswl "github.com/configstamp/configstamp/controllers/workload"
)

// The canary of a change (issue 38): status marks a running canary, why
// tells how it stands (running, passed, failed, off) with the hold it
// keeps, and plan names the workload that would be the canary.
func TestCanary(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	started := now.Add(-10 * time.Second)
	cause := "ConfigMap/cfg@c0ffee"
	const hold = `[{"path":"spec.strategy.rollingUpdate.maxSurge","set":1,"was":null},` +
		`{"path":"spec.strategy.rollingUpdate.maxUnavailable","set":0,"was":"25%"},{"path":"spec.minReadySeconds","set":90,"was":null}]`
	const heldText = "spec.strategy.rollingUpdate.maxSurge=1 (was: unset), spec.strategy.rollingUpdate.maxUnavailable=0 (was: 25%), " +
		"spec.minReadySeconds=90 (was: unset)"
	record := func(state string, extra ...string) map[string]string {
		a := map[string]string{rollout.AnnotationState: state, rollout.AnnotationStarted: started.Format(time.RFC3339), rollout.AnnotationCause: cause}
		for i := 0; i < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	running := deployment("api", record("rolling", rollout.AnnotationCanary, "running", rollout.AnnotationHold, hold))
	whole := deployment("whole", record("rolling", rollout.AnnotationCanary, "running"))
	other := deployment("other", record("rolling"))
	failed := deployment("bad", record("failed", rollout.AnnotationCanary, "running", rollout.AnnotationHold, hold, rollout.AnnotationHalted, cause))
	passed := deployment("passed", record("verifying", rollout.AnnotationCanary, "passed",
		rollout.AnnotationVerifyUntil, now.Add(20*time.Second).Format(time.RFC3339)))
	done := deployment("done", record("completed", rollout.AnnotationCanary, "passed"))
	off := deployment("off", record("completed"))
	off.Annotations[rollout.AnnotationCanaryOpt] = "false"
	passedEvent := configstampEvent(done, reasonCanaryPassed, "the canary of "+cause+" passed: its first new pod stayed healthy for 30s", now.Add(-5*time.Second))
	passedEvent.Type = corev1.EventTypeNormal
	objs := []runtime.Object{running, whole, other, failed, passed, done, off, passedEvent,
		configstampEvent(failed, reasonRolloutFailed, "rollout for "+cause+" failed: it failed verification: pod bad-1: container app restarted 1 time", now.Add(-2*time.Second))}

	t.Run("status", func(t *testing.T) {
		o, out := fakeCluster(t, now, objs...)
		if err := runStatus(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"deployment/api     rolling (canary)  ", "deployment/whole   rolling (canary)  ",
			"deployment/other   rolling  ", "deployment/passed  verifying until "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("want %q in\n%s", want, out)
			}
		}
		if strings.Contains(out.String(), "verifying until 2026-11-26T12:00:20Z (in 20s) (canary)") {
			t.Errorf("a passed canary marked as running:\n%s", out)
		}
		o, out = fakeCluster(t, now, objs...)
		o.output = "json"
		if err := runStatus(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		goldenJSON(t, "status-canary", out.Bytes())
		var res statusResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range res.Rolling {
			got[r.Name] = r.Canary
		}
		if got["api"] != "running" || got["whole"] != "running" || got["other"] != "" || got["passed"] != "passed" || len(got) != 4 {
			t.Errorf("canary by workload %v", got)
		}
		var raw struct{ Rolling []map[string]any }
		_ = json.Unmarshal(out.Bytes(), &raw)
		for _, r := range raw.Rolling {
			if _, ok := r["canary"]; ok != (r["name"] != "other") {
				t.Errorf("JSON field canary present %v on %v", ok, r)
			}
		}
	})

	tests := map[string]struct {
		workload   string
		nsAnn      map[string]string
		canary     string
		held       int
		passedAt   string
		notBefore  string
		row        string // the Canary: row, whole
		notInTable bool
	}{
		"running": {workload: "api", canary: "running", held: 3, notBefore: started.Add(30 * time.Second).Format(time.RFC3339),
			row: "Canary:        running: one new pod first, judged for its verification window; no other workload of the namespace gets the change " +
				"before it passes, not before 2026-11-26T12:00:20Z (in 20s); held: " + heldText},
		"whole workload": {workload: "whole", canary: "running",
			row: "Canary:        running: the whole workload is the canary, judged until its rollout completes and is verified; " +
				"no other workload of the namespace gets the change before it passes"},
		"failed": {workload: "bad", canary: "failed", held: 3,
			row: "Canary:        failed: the change is halted; the hold stays (" + heldText + ") so no second pod runs it"},
		"passed, verifying": {workload: "passed", canary: "passed", row: "Canary:           passed\n"},
		"passed":            {workload: "done", canary: "passed", passedAt: "2026-11-26T11:59:55Z", row: "Canary:        passed at 2026-11-26T11:59:55Z\n"},
		"off":               {workload: "off", canary: "off", row: "Canary:        off (configstamp.io/canary: false)\n"},
		"off by namespace": {workload: "other", nsAnn: map[string]string{rollout.AnnotationCanaryOpt: "false"}, canary: "off",
			row: "Canary:        off (configstamp.io/canary: false)\n"},
		"a running canary in an opted-out namespace": {workload: "api", nsAnn: map[string]string{rollout.AnnotationCanaryOpt: "false"}, canary: "running", held: 3,
			notBefore: started.Add(30 * time.Second).Format(time.RFC3339), row: "Canary:        running: one new pod first"},
		"no canary": {workload: "other", notInTable: true},
	}
	for name, tc := range tests {
		t.Run("why "+name, func(t *testing.T) {
			objs := objs
			if tc.nsAnn != nil {
				objs = append(objs[:len(objs):len(objs)], &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Annotations: tc.nsAnn}})
			}
			o, out := fakeCluster(t, now, objs...)
			if err := runWhy(t.Context(), o, []string{"deploy/" + tc.workload}); err != nil {
				t.Fatal(err)
			}
			if tc.notInTable == strings.Contains(out.String(), "Canary:") || !tc.notInTable && !strings.Contains(out.String(), tc.row) {
				t.Errorf("want the row %q in\n%s", tc.row, out)
			}
			res, _ := whyJSON(t, now, tc.workload, objs...)
			timeText := func(p *time.Time) string {
				if p == nil {
					return ""
				}
				return p.Format(time.RFC3339)
			}
			if res.Canary != tc.canary || len(res.Held) != tc.held || res.Held == nil || timeText(res.CanaryPassed) != tc.passedAt || timeText(res.CanaryNotBefore) != tc.notBefore {
				t.Errorf("canary %q held %v passed %s notBefore %s; want %q, %d fields, %q, %q", res.Canary, res.Held,
					timeText(res.CanaryPassed), timeText(res.CanaryNotBefore), tc.canary, tc.held, tc.passedAt, tc.notBefore)
			}
			if tc.held > 0 && (res.Held[1] != heldField{Path: "spec.strategy.rollingUpdate.maxUnavailable", Set: "0", Was: "25%"}) {
				t.Errorf("held %+v", res.Held)
			}
		})
	}
	t.Run("why golden", func(t *testing.T) {
		o, out := fakeCluster(t, now, objs...)
		o.output = "json"
		if err := runWhy(t.Context(), o, []string{"deploy/api"}); err != nil {
			t.Fatal(err)
		}
		goldenJSON(t, "why-canary", out.Bytes())
	})
}

// plan names the canary: the first workload that rolls in wave order
// (priority, then name, then kind), passing over those that opted out.
func TestPlanCanary(t *testing.T) {
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}
	mk := func(kind, name string, ann map[string]string) workload {
		return workload{kind: kind, meta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{stamp.LabelEnabled: "true"}, Annotations: ann},
			template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: *pod.DeepCopy()}}
	}
	prio := func(p string) map[string]string { return map[string]string{rollout.AnnotationPriority: p} }
	as := func(w workload, st cswl.Status) workload { w.status = st; return w }
	optOut := map[string]string{rollout.AnnotationCanaryOpt: "false", rollout.AnnotationPriority: "100"}
	unrelated := mk("Deployment", "aaa-unrelated", prio("1000"))
	unrelated.template.Spec = corev1.PodSpec{}
	live, next := cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "2"}, nil)
	tests := map[string]struct {
		ws     []workload
		nsAnn  map[string]string
		canary string // kind/name; "" none
		line   string
		also   string // another line the plan prints
	}{
		"by name":        {ws: []workload{mk("Deployment", "b", nil), mk("Deployment", "a", nil), unrelated}, canary: "Deployment/a"},
		"by kind":        {ws: []workload{mk("StatefulSet", "a", nil), mk("DaemonSet", "a", nil)}, canary: "DaemonSet/a"},
		"priority first": {ws: []workload{mk("Deployment", "a", nil), mk("Deployment", "z", prio("5")), mk("Deployment", "y", prio("-1"))}, canary: "Deployment/z"},
		// A Recreate Deployment's canary replaces all its pods: at one
		// priority, the workload held at one new pod goes first.
		"the cheaper canary first": {ws: []workload{as(mk("Deployment", "a", nil), cswl.Status{CanaryPods: 3}), mk("Deployment", "b", nil)}, canary: "Deployment/b"},
		"priority before cost": {ws: []workload{as(mk("Deployment", "a", prio("5")), cswl.Status{CanaryPods: 3}), mk("Deployment", "b", nil)}, canary: "Deployment/a",
			also: "deployment/a cannot be held at one new pod: its canary runs the change on 3 pods at once"},
		// A workload that can make no pod now is never the canary.
		"paused passed over":    {ws: []workload{as(mk("Deployment", "a", prio("5")), cswl.Status{Paused: true}), mk("Deployment", "b", nil)}, canary: "Deployment/b"},
		"opted out passed over": {ws: []workload{mk("Deployment", "a", nil), mk("Deployment", "z", optOut)}, canary: "Deployment/a"},
		"namespace opted out": {ws: []workload{mk("Deployment", "a", nil), mk("Deployment", "z", prio("5"))}, nsAnn: map[string]string{rollout.AnnotationCanaryOpt: "false"},
			line: "Canary: none (deployment/a, deployment/z: configstamp.io/canary: false)"},
		"workload on in an opted-out namespace": {ws: []workload{mk("Deployment", "a", nil), mk("Deployment", "z", map[string]string{rollout.AnnotationCanaryOpt: "true"})},
			nsAnn: map[string]string{rollout.AnnotationCanaryOpt: "false"}, canary: "Deployment/z"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := planFor(live, next, tc.ws, nil, func(string) map[string]string { return nil }, func(string) map[string]string { return tc.nsAnn })
			var got []string
			for _, e := range res.Workloads {
				if e.Canary {
					got = append(got, e.Kind+"/"+e.Name)
				}
			}
			if strings.Join(got, ",") != tc.canary {
				t.Errorf("canary %v, want %q", got, tc.canary)
			}
			o, out := fakeCluster(t, time.Now())
			printPlan(o, res)
			line := tc.line
			if tc.canary != "" {
				line = "Canary: " + strings.ToLower(tc.canary) + " (first in the wave: it gets the change first, on one new pod where it can be held; " +
					"the others that roll wait until it passes)\n"
			}
			if !strings.Contains(out.String(), line) || !strings.Contains(out.String(), tc.also) {
				t.Errorf("want %q and %q in\n%s", line, tc.also, out)
			}
		})
	}
	t.Run("one rolls", func(t *testing.T) {
		res := planFor(live, next, []workload{mk("Deployment", "a", nil), unrelated}, nil, func(string) map[string]string { return nil }, func(string) map[string]string { return nil })
		o, out := fakeCluster(t, time.Now())
		printPlan(o, res)
		if want := "Canary: deployment/a (the only workload that rolls: it gets the change on one new pod first, where it can be held)\n"; !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	})
	t.Run("nothing rolls", func(t *testing.T) {
		res := planFor(live, live, []workload{mk("Deployment", "a", nil)}, nil, func(string) map[string]string { return nil }, func(string) map[string]string { return nil })
		o, out := fakeCluster(t, time.Now())
		printPlan(o, res)
		if res.Workloads[0].Canary || strings.Contains(out.String(), "Canary:") {
			t.Errorf("a canary named for a change that rolls nothing:\n%s", out)
		}
	})
}

// canaryPodOf is a pod of d's ReplicaSet of revision hash (the template's
// stamp), created at made, Ready since ready (zero: not Ready).
func canaryPodOf(d *appsv1.Deployment, suffix, hash string, made, ready time.Time, restarts int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: d.Name + "-" + suffix, CreationTimestamp: metav1.NewTime(made),
		Labels:          map[string]string{"app": d.Name, appsv1.DefaultDeploymentUniqueLabelKey: "5d8c7"},
		Annotations:     map[string]string{stamp.AnnotationHash: hash},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: d.Name + "-5d8c7", UID: "rs-" + types.UID(d.Name), Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(made.Add(time.Second))}}}}}}
	status, since := corev1.ConditionFalse, made
	if !ready.IsZero() {
		status, since = corev1.ConditionTrue, ready
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: status, LastTransitionTime: metav1.NewTime(since)},
		{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	if restarts > 0 {
		p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			FinishedAt: metav1.NewTime(made.Add(3 * time.Second))}
	}
	return p
}

// why names a canary's pod as configstamp's verification picks it (the
// workload's own, of the new revision), with its phase, readiness and
// restarts, until when the canary is judged (its pod's healthy start plus
// the window), and its verdict with the reason.
func TestWhyCanaryPod(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	started := now.Add(-20 * time.Second)
	cause := "ConfigMap/cfg@c0ffee"
	const hold = `[{"path":"spec.strategy.rollingUpdate.maxSurge","set":1,"was":null},{"path":"spec.minReadySeconds","set":90,"was":null}]`
	record := func(state string, extra ...string) map[string]string {
		a := map[string]string{rollout.AnnotationState: state, rollout.AnnotationStarted: started.Format(time.RFC3339), rollout.AnnotationCause: cause,
			stamp.AnnotationSources: "ConfigMap/cfg=c0ffee", rollout.AnnotationCanary: "running"}
		for i := 0; i < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	api := deployment("api", record("rolling", rollout.AnnotationHold, hold))
	failing := deployment("failing", record("rolling", rollout.AnnotationHold, hold))
	bad := deployment("bad", record("failed", rollout.AnnotationHold, hold, rollout.AnnotationHalted, cause))
	whole := deployment("whole", record("verifying", rollout.AnnotationVerifyUntil, now.Add(12*time.Second).Format(time.RFC3339)))
	waiting := deployment("waiting", record("rolling", rollout.AnnotationHold, hold))
	done := deployment("done", record("rolling", rollout.AnnotationCanary, "passed"))
	twin := canaryPodOf(api, "twin", "h-api", started, started.Add(5*time.Second), 0) // same labels and stamp, another owner
	twin.OwnerReferences[0].Name = "api-canary-5d8c7"
	const crash = "it failed verification: pod bad-5d8c7-x2k8q: container app restarted 2 times (exit code 1, Error)"
	objs := []runtime.Object{api, failing, bad, whole, waiting, done, twin,
		canaryPodOf(api, "5d8c7-x2k8q", "h-api", started.Add(time.Second), now.Add(-10*time.Second), 0),
		canaryPodOf(api, "5d8c7-later", "h-api", now.Add(-2*time.Second), time.Time{}, 0),
		canaryPodOf(api, "old-1", "h-old", now.Add(-time.Hour), now.Add(-time.Hour), 0),
		canaryPodOf(failing, "5d8c7-x2k8q", "h-failing", started.Add(time.Second), now.Add(-5*time.Second), 1),
		canaryPodOf(bad, "5d8c7-x2k8q", "h-bad", started.Add(time.Second), time.Time{}, 2),
		canaryPodOf(whole, "5d8c7-a", "h-whole", started.Add(time.Second), started.Add(8*time.Second), 0),
		canaryPodOf(whole, "5d8c7-b", "h-whole", started.Add(2*time.Second), started.Add(9*time.Second), 0),
		configstampEvent(bad, reasonRolloutFailed, "rollout for "+cause+" failed: "+crash+"; configstamp halts further rollouts", now.Add(-2*time.Second)),
		func() *corev1.Event {
			e := configstampEvent(done, reasonCanaryPassed, "the canary of "+cause+" passed: its first new pod stayed healthy for 30s; "+
				"the rest of this workload and the other workloads of the change roll on", now.Add(-time.Second))
			e.Type = corev1.EventTypeNormal
			return e
		}(),
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := map[string]struct {
		pods   []string
		until  *time.Time
		reason string
	}{
		"api":     {pods: []string{"api-5d8c7-x2k8q", "api-5d8c7-later"}, until: at(20 * time.Second)},
		"failing": {pods: []string{"failing-5d8c7-x2k8q"}, reason: "failing: pod failing-5d8c7-x2k8q: container app restarted 1 times (exit code 1, Error) (configstamp fails it when it next judges it)"},
		"bad":     {pods: []string{"bad-5d8c7-x2k8q"}, reason: crash},
		"whole":   {pods: []string{"whole-5d8c7-a", "whole-5d8c7-b"}, until: at(12 * time.Second)},
		"waiting": {},
		"done":    {reason: "its first new pod stayed healthy for 30s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, raw := whyJSON(t, now, name, objs...)
			var pods []string
			for _, p := range res.CanaryPods {
				pods = append(pods, p.Name)
			}
			if !slices.Equal(pods, tc.pods) || !reflect.DeepEqual(res.CanaryJudgedUntil, tc.until) || res.CanaryReason != tc.reason {
				t.Errorf("pods %v until %v reason %q; want %v, %v, %q", pods, res.CanaryJudgedUntil, res.CanaryReason, tc.pods, tc.until, tc.reason)
			}
			if name == "api" {
				goldenJSON(t, "why-canary-pod", raw)
			}
			o, out := fakeCluster(t, now, objs...)
			if err := runWhy(t.Context(), o, []string{"deploy/" + name}); err != nil {
				t.Fatal(err)
			}
			goldenText(t, "why-canary-"+name, out.Bytes())
		})
	}
	t.Run("pods unreadable", func(t *testing.T) {
		o, out := fakeCluster(t, now, objs...)
		o.client.(*kubefake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no"))
		})
		if err := runWhy(t.Context(), o, []string{"deploy/api"}); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`Canary pod:\s+its pods could not be read: .*forbidden`).MatchString(out.String()) {
			t.Errorf("want the pods' read error in\n%s", out)
		}
	})
}

// plan names every canary of a file's changes, as the controller grants
// them (rollout.Canaries): per namespace and per change, key-precise (a
// workload that references other keys rolls a change of its own, with its
// own canary), across the file's objects (a workload that references two
// of them rolls both changes at once, and may be the canary of one only).
func TestPlanCanaries(t *testing.T) {
	type ref struct{ kind, obj, key string } // key "": every key (envFrom)
	mk := func(ns, name string, ann map[string]string, refs ...ref) *appsv1.Deployment {
		d := deployment(name, ann)
		d.Namespace = ns
		c := corev1.Container{Name: "app"}
		for _, r := range refs {
			switch {
			case r.key == "":
				c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.obj}}})
			case r.kind == "Secret":
				c.Env = append(c.Env, corev1.EnvVar{Name: strings.ToUpper(r.key), ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: r.obj}, Key: r.key}}})
			default:
				c.Env = append(c.Env, corev1.EnvVar{Name: strings.ToUpper(r.key), ValueFrom: &corev1.EnvVarSource{
					ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: r.obj}, Key: r.key}}})
			}
		}
		d.Spec.Template.Spec.Containers = []corev1.Container{c}
		return d
	}
	a, b, all, p, x := ref{"ConfigMap", "cfg", "a"}, ref{"ConfigMap", "cfg", "b"}, ref{"ConfigMap", "cfg", ""}, ref{"Secret", "creds", "p"}, ref{"ConfigMap", "cfg", "x"}
	objs := []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1", "b": "1"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"p": []byte("1")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns2", Name: "cfg"}, Data: map[string]string{"x": "1"}},
		mk("ns", "web", map[string]string{rollout.AnnotationPriority: "5"}, a), // first in the wave: the canary of key a's change
		mk("ns", "api", nil, a, p),  // waits for web on cfg; the Secret's canary
		mk("ns", "batch", nil, all), // every key: a change of its own
		mk("ns", "legacy", map[string]string{rollout.AnnotationCanaryOpt: "false"}, a),
		mk("ns", "worker", nil, b, p), // key b's canary; waits for api on the Secret
		mk("ns", "zeta", nil, b),
		mk("ns2", "front", nil, x), mk("ns2", "back", nil, x),
	}
	manifest := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns}
data: {a: "2", b: "2"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ns}
stringData: {p: "2"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns2}
data: {x: "2"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(output string) []byte {
		o, out := fakeCluster(t, time.Now(), objs...)
		o.namespace, o.filename, o.output = "", manifest, output
		if err := runPlan(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	var res planOutput
	raw := run("json")
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, obj := range res.Objects {
		for _, e := range obj.Workloads {
			what := "waits for " + e.WaitsFor
			switch {
			case e.Canary:
				what = "canary"
			case !e.Rolls:
				what = "no"
			case e.WaitsFor == "":
				what = "no wait"
			}
			got[obj.Kind+" "+obj.Namespace+"/"+e.Name] = what
		}
	}
	want := map[string]string{
		"ConfigMap ns/web": "canary", "ConfigMap ns/api": "waits for deployment/web", "ConfigMap ns/batch": "canary",
		"ConfigMap ns/legacy": "no wait", "ConfigMap ns/worker": "canary", "ConfigMap ns/zeta": "waits for deployment/worker",
		"Secret ns/api": "canary", "Secret ns/worker": "waits for deployment/api",
		"ConfigMap ns2/back": "canary", "ConfigMap ns2/front": "waits for deployment/back",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("canaries:\n%v\nwant\n%v", got, want)
	}
	goldenJSON(t, "plan-canaries", raw)
	goldenText(t, "plan-canaries", run(""))

	// In rings, the copies are one change, judged by ring 0's canary.
	for ns, ring := range map[string]string{"ns": "0", "ns2": "1"} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{rollout.LabelRing: ring}}})
	}
	res = planOutput{}
	if err := json.Unmarshal(run("json"), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.AcrossNamespaces) != 1 || !reflect.DeepEqual(res.AcrossNamespaces[0].Rings, map[string]int{"ns": 0, "ns2": 1}) {
		t.Errorf("in rings: acrossNamespaces %+v; want ns in ring 0, ns2 in ring 1", res.AcrossNamespaces)
	}
	if text := string(run("")); !strings.Contains(text, "in rings ring 0 (ns), ring 1 (ns2), the lowest ring's canary judges a change once") {
		t.Errorf("in rings, the plan says:\n%s", text)
	}
}

// plan says when a workload that rolls a change waits for the rest of its
// rotate-together group: the members the manifest leaves unchanged.
func TestPlanRotateTogether(t *testing.T) {
	secret := func(name, v string) *source {
		return &source{ref: stamp.ObjectRef{Kind: stamp.KindSecret, Name: name}, namespace: "ns", data: map[string][]byte{"v": []byte(v)}}
	}
	var from []corev1.EnvFromSource
	for _, n := range []string{"db-user", "db-password"} {
		from = append(from, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	w := workload{kind: "Deployment", meta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Labels: map[string]string{stamp.LabelEnabled: "true"},
		Annotations: map[string]string{rollout.AnnotationRotateTogether: "Secret/db-user,Secret/db-password"}},
		template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "app"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: from}}}}}
	none := func(string) map[string]string { return nil }
	plan := func(names ...string) []planResult {
		var out []planResult
		for _, n := range names {
			out = append(out, planFor(secret(n, "0"), secret(n, "1"), []workload{w}, nil, none, none))
		}
		markRotations(out)
		return out
	}
	const waits = "it waits for the rest of its configstamp.io/rotate-together group, unchanged here (Secret/db-password), at most 10m0s"
	if got := plan("db-user")[0].Workloads[0]; !got.Rolls || !strings.Contains(got.Reason, waits) {
		t.Errorf("only db-user changes: %+v; want it to roll, saying %q", got, waits)
	}
	for _, res := range plan("db-user", "db-password") {
		if got := res.Workloads[0]; !got.Rolls || strings.Contains(got.Reason, "waits for the rest") {
			t.Errorf("both change: %+v; want it to roll, waiting for nothing", got)
		}
	}
}

// why shows a workload's rotate-together group, which members were written
// since its last stamp, and what it waits for.
func TestWhyRotateTogether(t *testing.T) {
	d := deployment("app", map[string]string{rollout.AnnotationRotateTogether: "Secret/db-user,Secret/db-password",
		stamp.AnnotationSourceVersions: stamp.FormatVersions(map[stamp.ObjectRef]string{
			{Kind: stamp.KindSecret, Name: "db-user"}: "5", {Kind: stamp.KindSecret, Name: "db-password"}: "6"})})
	for _, n := range []string{"db-user", "db-password"} {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: n,
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}}})
	}
	secret := func(name, version string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: version}}
	}
	for _, tc := range []struct {
		name    string
		user    string
		want    string
		written int
	}{
		{"none written", "5", "Secret/db-user, Secret/db-password: none written since its last rollout", 0},
		{"half written", "7", "Secret/db-user written since its last rollout; it waits for Secret/db-password, at most 10m0s from the first change", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, out := fakeCluster(t, time.Now(), d)
			scheme := metadatafake.NewTestScheme()
			scheme.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("Secret"), &metav1.PartialObjectMetadata{})
			o.meta = metadatafake.NewSimpleMetadataClient(scheme, secret("db-user", tc.user), secret("db-password", "6"))
			if err := runWhy(t.Context(), o, []string{"deploy/app"}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("want %q in\n%s", tc.want, out)
			}
			o.output = "json"
			out.Reset()
			if err := runWhy(t.Context(), o, []string{"deploy/app"}); err != nil {
				t.Fatal(err)
			}
			var res whyResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Rotation == nil || len(res.Rotation.Written) != tc.written {
				t.Errorf("json rotation %+v (%v), want %d written", res.Rotation, err, tc.written)
			}
		})
	}
}
