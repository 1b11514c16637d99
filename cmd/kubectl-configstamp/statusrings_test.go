package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// Issue 54: status shows a copied config's rollout ring by ring. Ring 0's
// canary of ConfigMap/shared passed and its second workload verifies; of
// ring 1, one namespace completed and one is halted; an unringed namespace
// rolling the same name is no part of the group, and a source rolled only
// to completion is not in flight.
func TestStatusRingByRing(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) string { return now.Add(-ago).Format(time.RFC3339) }
	record := func(state, started, cause string, extra ...string) map[string]string {
		a := map[string]string{rollout.AnnotationState: state, rollout.AnnotationStarted: started, rollout.AnnotationCause: cause}
		for i := 0; i < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	in := func(ns, name string, rec map[string]string) runtime.Object {
		d := deployment(name, rec)
		d.Namespace = ns
		return d
	}
	namespace := func(name, ring string) runtime.Object {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if ring != "" {
			n.Labels = map[string]string{rollout.LabelRing: ring}
		}
		return n
	}
	const shared, other = "ConfigMap/shared@aaa", "ConfigMap/other@bbb"
	o, out := fakeCluster(t, now,
		namespace("base", "0"), namespace("t1", "1"), namespace("t2", "1"), namespace("loose", ""), namespace("bad-ring", "first"),
		in("base", "canary", record("verifying", at(90*time.Second), shared, rollout.AnnotationCanary, "passed",
			rollout.AnnotationVerifyUntil, now.Add(10*time.Second).Format(time.RFC3339))),
		in("base", "second", record("rolling", at(20*time.Second), shared)),
		in("t1", "app", record("completed", at(10*time.Second), shared)),
		in("t2", "app", record("failed", at(5*time.Second), shared, rollout.AnnotationHalted, shared)),
		in("t2", "quiet", record("completed", at(time.Hour), other)),
		in("loose", "app", record("rolling", at(time.Second), shared)),
		in("bad-ring", "app", record("rolling", at(time.Second), shared)),
	)
	o.output, o.namespace = "json", "" // cluster-wide
	if err := runStatus(t.Context(), o, nil); err != nil {
		t.Fatal(err)
	}
	var res statusResult
	jsonOf(t, out.Bytes(), &res)
	last := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	want := []ringGroup{{Source: "ConfigMap/shared", Rings: []ringState{
		{Ring: 0, Namespaces: []string{"base"}, Rolling: 1, Verifying: 1, LastStarted: last(20 * time.Second)},
		{Ring: 1, Namespaces: []string{"t1", "t2"}, Completed: 1, Halted: 1, LastStarted: last(5 * time.Second)},
	}}}
	if !reflect.DeepEqual(res.Rings, want) {
		got, _ := json.Marshal(res.Rings)
		t.Errorf("rings %s, want ring 0 (1 rolling, 1 verifying) and ring 1 (1 completed, 1 halted) of ConfigMap/shared only", got)
	}

	o, out = fakeCluster(t, now, namespace("base", "0"),
		in("base", "canary", record("rolling", at(time.Second), shared, rollout.AnnotationCanary, "running")))
	o.namespace = ""
	if err := runStatus(t.Context(), o, nil); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"Ring by ring: ConfigMap/shared (judged once, by the lowest ring's canary)",
		"0     1 (base)    1 (canary base/deployment/canary)  0          0          0       2026-12-08T11:59:59Z"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("want %q in\n%s", line, out)
		}
	}
}

func jsonOf(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
}
