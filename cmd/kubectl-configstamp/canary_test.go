package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// The canary of a change (issue 38): status marks a running canary, why
// tells how it stands (running, passed, failed, off) with the hold it
// keeps, and plan names the workload that would be the canary.
func TestCanary(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	started := now.Add(-10 * time.Second)
	cause := "ConfigMap/cfg@c0ffee"
	const hold = `[{"path":"spec.strategy.rollingUpdate.maxSurge","set":1,"was":null},` +
		`{"path":"spec.strategy.rollingUpdate.maxUnavailable","set":0,"was":"25%"},{"path":"spec.minReadySeconds","set":30,"was":null}]`
	const heldText = "spec.strategy.rollingUpdate.maxSurge=1 (was: unset), spec.strategy.rollingUpdate.maxUnavailable=0 (was: 25%), " +
		"spec.minReadySeconds=30 (was: unset)"
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
	optOut := map[string]string{rollout.AnnotationCanaryOpt: "false", rollout.AnnotationPriority: "100"}
	unrelated := mk("Deployment", "aaa-unrelated", prio("1000"))
	unrelated.template.Spec = corev1.PodSpec{}
	live, next := cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "2"}, nil)
	tests := map[string]struct {
		ws     []workload
		nsAnn  map[string]string
		canary string // kind/name; "" none
		line   string
	}{
		"by name":               {ws: []workload{mk("Deployment", "b", nil), mk("Deployment", "a", nil), unrelated}, canary: "Deployment/a"},
		"by kind":               {ws: []workload{mk("StatefulSet", "a", nil), mk("DaemonSet", "a", nil)}, canary: "DaemonSet/a"},
		"priority first":        {ws: []workload{mk("Deployment", "a", nil), mk("Deployment", "z", prio("5")), mk("Deployment", "y", prio("-1"))}, canary: "Deployment/z"},
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
			if !strings.Contains(out.String(), line) {
				t.Errorf("want %q in\n%s", line, out)
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
