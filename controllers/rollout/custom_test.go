package rollout

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

func custom(kind string, gen int64, spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": kind,
		"metadata": map[string]any{"name": "x", "generation": gen}, "spec": spec, "status": status}}
	return u
}

// The progress of an extra kind, as its configuration names it: Argo
// Rollouts' phase and string observedGeneration, and a replica-count kind.
func TestCustomComplete(t *testing.T) {
	kinds := kindstest.Registry(t, `
kinds:
  - {group: example.com, version: v1, kind: Rollout, resource: rollouts, templatePath: spec.template,
     progress: {observedGeneration: status.observedGeneration, phase: status.phase, completePhases: [Healthy, Paused], failedPhases: [Degraded]}}
  - {group: example.com, version: v1, kind: Counted, resource: counteds, templatePath: spec.template,
     progress: {observedGeneration: status.observedGeneration, replicas: spec.replicas, updatedReplicas: status.updated, availableReplicas: status.available}}
  - {group: example.com, version: v1, kind: Blind, resource: blinds, templatePath: spec.template}
`)
	for _, tc := range []struct {
		name                string
		obj                 *unstructured.Unstructured
		complete, exceeded  bool
		nothingToWaitForToo bool
	}{
		{"rollout healthy, generation observed (string)", custom("Rollout", 3, nil, map[string]any{"observedGeneration": "3", "phase": "Healthy"}), true, false, false},
		{"rollout healthy, older generation", custom("Rollout", 4, nil, map[string]any{"observedGeneration": "3", "phase": "Healthy"}), false, false, false},
		{"rollout progressing", custom("Rollout", 3, nil, map[string]any{"observedGeneration": "3", "phase": "Progressing"}), false, false, false},
		{"rollout paused at a step", custom("Rollout", 3, nil, map[string]any{"observedGeneration": "3", "phase": "Paused"}), true, false, false},
		{"rollout degraded", custom("Rollout", 3, nil, map[string]any{"observedGeneration": "3", "phase": "Degraded"}), false, true, false},
		{"rollout without status", custom("Rollout", 1, nil, nil), false, false, false},
		{"rollout observedGeneration garbage", custom("Rollout", 1, nil, map[string]any{"observedGeneration": "abc", "phase": "Healthy"}), false, false, false},
		{"counted done (integer generation)", custom("Counted", 2, map[string]any{"replicas": int64(3)}, map[string]any{"observedGeneration": int64(2), "updated": int64(3), "available": int64(3)}), true, false, false},
		{"counted updating", custom("Counted", 2, map[string]any{"replicas": int64(3)}, map[string]any{"observedGeneration": int64(2), "updated": int64(2), "available": int64(2)}), false, false, false},
		{"counted not available", custom("Counted", 2, map[string]any{"replicas": int64(3)}, map[string]any{"observedGeneration": int64(2), "updated": int64(3), "available": int64(1)}), false, false, false},
		{"counted, replicas default 1", custom("Counted", 2, nil, map[string]any{"observedGeneration": int64(2), "updated": int64(1), "available": int64(1)}), true, false, false},
		{"no progress configured", custom("Blind", 7, nil, nil), true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, _ := kinds.Of(tc.obj)
			complete, exceeded := Complete(kind, tc.obj, Verification{})
			if complete != tc.complete || exceeded != tc.exceeded {
				t.Fatalf("Complete = %v, %v; want %v, %v", complete, exceeded, tc.complete, tc.exceeded)
			}
			if got := kind.Status(tc.obj).NothingToWaitFor; got != tc.nothingToWaitForToo {
				t.Fatalf("NothingToWaitFor = %v", got)
			}
		})
	}
	degraded := custom("Rollout", 3, nil, map[string]any{"observedGeneration": "3", "phase": "Degraded"})
	kind, _ := kinds.Of(degraded)
	j := Judge(kind, degraded, Record{State: Rolling, Started: time.Now()}, Verification{}, time.Minute, time.Time{}, time.Now())
	if j.Trigger != RolloutFailed || !strings.Contains(j.Reason, `"Degraded"`) {
		t.Fatalf("Judge of a degraded Rollout = %+v", j)
	}
}
