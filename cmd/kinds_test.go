package main

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configstamp/configstamp/controllers/workload"
)

// A kind whose CRD is installed after start is noticed by discovery (not a
// cached mapping), and configstamp restarts to handle it; a kind that is
// still not served, or served under another resource, restarts nothing.
func TestServedLaterRestartsOnceServed(t *testing.T) {
	cfg, err := workload.ParseKindsConfig([]byte(`kinds: [{group: example.com, version: v1, kind: Widget, resource: widgets, templatePath: spec.template}]`))
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	restarted := make(chan struct{})
	s := &servedLater{discovery: fake, missing: cfg, interval: 10 * time.Millisecond, log: logr.Discard(),
		restart: func() { close(restarted) }}
	if s.served(cfg[0]) {
		t.Fatal("served with no resources at all")
	}
	fake.Resources = []*metav1.APIResourceList{{GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{{Name: "gadgets", Kind: "Gadget", Namespaced: true}}}}
	if s.served(cfg[0]) {
		t.Fatal("served when only another kind of the group is")
	}
	done := make(chan error, 1)
	go func() { done <- s.Start(t.Context()) }()
	fake.Lock()
	fake.Resources[0].APIResources = append(fake.Resources[0].APIResources, metav1.APIResource{Name: "widgets", Kind: "Widget", Namespaced: true})
	fake.Unlock()
	select {
	case <-restarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the Widget CRD is served, and configstamp did not restart")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
