package main

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper answers Deployments as namespaced and nothing else, counting
// the questions it is asked.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

var deployments = schema.GroupKind{Group: "apps", Kind: "Deployment"}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	if gk != deployments {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return &meta.RESTMapping{Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		GroupVersionKind: deployments.WithVersion("v1"), Scope: meta.RESTScopeNamespace}, nil
}

// A mapping found is reused for mappingTTL, then asked again; a kind not
// found is asked again every time (it may be installed a moment later).
func TestMapperRemembersMappingsFound(t *testing.T) {
	inner := &countingMapper{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &memoMapper{RESTMapper: inner, now: func() time.Time { return now }, found: map[mappingKey]foundMapping{}}
	for range 100 {
		got, err := m.RESTMapping(deployments, "v1")
		if err != nil || got.Scope.Name() != meta.RESTScopeNameNamespace || got.Resource.Resource != "deployments" {
			t.Fatalf("RESTMapping(Deployment) = %+v, %v", got, err)
		}
	}
	if inner.asked != 1 {
		t.Fatalf("100 questions within the TTL reached the mapper %d times, want once", inner.asked)
	}
	if _, err := m.RESTMapping(deployments, "v2"); err != nil || inner.asked != 2 {
		t.Fatalf("another version: err %v, mapper asked %d times, want 2", err, inner.asked)
	}
	now = now.Add(mappingTTL)
	if _, err := m.RESTMapping(deployments, "v1"); err != nil || inner.asked != 3 {
		t.Fatalf("after the TTL: err %v, mapper asked %d times, want 3", err, inner.asked)
	}
	rollouts := schema.GroupKind{Group: "argoproj.io", Kind: "Rollout"}
	for i := range 2 {
		if _, err := m.RESTMapping(rollouts, "v1alpha1"); !meta.IsNoMatchError(err) {
			t.Fatalf("a kind not installed: err %v, want no match", err)
		}
		if inner.asked != 4+i {
			t.Fatalf("a kind not installed was remembered: mapper asked %d times, want %d", inner.asked, 4+i)
		}
	}
}
