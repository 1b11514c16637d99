package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

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

// flappingDiscovery answers each check from answers in turn (true: the
// Widget is served), then serves it for good.
type flappingDiscovery struct {
	discovery.DiscoveryInterface
	mu      sync.Mutex
	answers []bool
	checks  int
}

func (f *flappingDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	served := true
	if f.checks < len(f.answers) {
		served = f.answers[f.checks]
	}
	f.checks++
	list := &metav1.APIResourceList{GroupVersion: gv}
	if served {
		list.APIResources = []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true}}
	}
	return list, nil
}

// A CRD that flaps (served at one check, gone at the next) restarts nothing;
// one served three checks in a row, and still at the check after the
// replica's jitter, restarts once.
func TestServedLaterIgnoresAFlappingCRD(t *testing.T) {
	cfg, err := workload.ParseKindsConfig([]byte(`kinds: [{group: example.com, version: v1, kind: Widget, resource: widgets, templatePath: spec.template}]`))
	if err != nil {
		t.Fatal(err)
	}
	// 30 checks of flapping: served twice in a row at most, and once served
	// three times in a row but gone at the check after the jitter.
	var answers []bool
	for range 10 {
		answers = append(answers, true, true, false)
	}
	answers = append(answers, true, true, true, false, false)
	d := &flappingDiscovery{answers: answers}
	var restarts atomic.Int32
	var restartedAt atomic.Int64
	s := &servedLater{discovery: d, missing: cfg, interval: time.Millisecond, log: logr.Discard(),
		jitter:  func(time.Duration) time.Duration { return 0 },
		restart: func() { restarts.Add(1); d.mu.Lock(); restartedAt.Store(int64(d.checks)); d.mu.Unlock() }}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if restarts.Load() != 1 {
		t.Fatalf("%d restarts, want 1", restarts.Load())
	}
	// The first restart may come only after the flapping: 3 steady checks
	// and the one after the jitter, past the answers that flap.
	if at := int(restartedAt.Load()); at < len(answers)+4 {
		t.Fatalf("restarted at check %d, while the CRD was still flapping (answers end at check %d)", at, len(answers))
	}
}

// A served kind configstamp cannot list is left out, with an error logged,
// and the other kinds are handled: its cache would never sync and keep every
// replica from becoming ready. It is waited for like a kind not served yet.
func TestUnlistableKindDoesNotBlockTheOthers(t *testing.T) {
	cfg, err := workload.ParseKindsConfig([]byte(`kinds:
- {group: example.com, version: v1, kind: Widget, resource: widgets, templatePath: spec.template}
- {group: example.com, version: v1, kind: Gadget, resource: gadgets, templatePath: spec.template}`))
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, c := range cfg {
		mapper.Add(c.GVK(), meta.RESTScopeNamespace)
	}
	canList := func(_ context.Context, c workload.KindConfig) error {
		if c.Kind == "Gadget" {
			return apierrors.NewForbidden(schema.GroupResource{Group: c.Group, Resource: c.Resource}, "", errors.New("no list granted"))
		}
		return nil
	}
	installed, missing, err := installedKinds(t.Context(), mapper, cfg, canList, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if len(installed) != 1 || installed[0].Name != "Widget" || len(missing) != 1 || missing[0].Kind != "Gadget" {
		t.Fatalf("installed %v, missing %v; want Widget handled, Gadget waited for", installed, missing)
	}
}

// A kind that is served but cannot be listed restarts nothing, however long;
// once configstamp can list it (access granted), it restarts to handle it.
func TestUnlistableKindTakenUpOnceListable(t *testing.T) {
	cfg, err := workload.ParseKindsConfig([]byte(`kinds: [{group: example.com, version: v1, kind: Widget, resource: widgets, templatePath: spec.template}]`))
	if err != nil {
		t.Fatal(err)
	}
	d := &flappingDiscovery{} // served at every check
	var lists atomic.Int32
	var restarts atomic.Int32
	s := &servedLater{discovery: d, missing: cfg, interval: time.Millisecond, log: logr.Discard(),
		jitter:  func(time.Duration) time.Duration { return 0 },
		restart: func() { restarts.Add(1) },
		canList: func(_ context.Context, c workload.KindConfig) error {
			if lists.Add(1) <= 20 {
				return apierrors.NewForbidden(schema.GroupResource{Group: c.Group, Resource: c.Resource}, "", errors.New("no list granted"))
			}
			return nil
		}}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if restarts.Load() != 1 || lists.Load() < 24 {
		t.Fatalf("%d restarts after %d list attempts; want 1, only after the 20 refused ones, 3 steady checks and the one after the jitter",
			restarts.Load(), lists.Load())
	}
}

// For the namespaced install, --print-rbac gives a Role and a RoleBinding with
// the subject config/namespaced/watched-role binds, and no cluster-wide right.
func TestKindsRBACNamespaced(t *testing.T) {
	cfg, err := workload.ParseKindsConfig([]byte(`kinds: [{group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}]`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kindsRBAC(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	watched, err := os.ReadFile("../config/namespaced/watched-role/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var got, want rbacv1.RoleBinding
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, meta.Kind)
		if meta.Kind == "RoleBinding" {
			_ = yaml.Unmarshal([]byte(doc), &got)
		}
	}
	for _, doc := range strings.Split(string(watched), "\n---\n") {
		if strings.Contains(doc, "kind: RoleBinding") {
			_ = yaml.Unmarshal([]byte(doc), &want)
		}
	}
	if strings.Join(kinds, ",") != "Role,RoleBinding" {
		t.Fatalf("printed %v, want a Role and a RoleBinding only", kinds)
	}
	if len(want.Subjects) != 1 || !slices.Equal(got.Subjects, want.Subjects) || got.RoleRef.Kind != "Role" {
		t.Fatalf("binding subjects %v (role %v), want watched-role's %v", got.Subjects, got.RoleRef, want.Subjects)
	}
}
