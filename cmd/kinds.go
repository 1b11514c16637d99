package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/controllers/workload"
)

// installedKinds returns the kinds of cfg whose CRD the API server serves,
// as workload kinds, and those it does not serve. A kind whose CRD is missing
// is left out and logged: caches, reconcilers and webhook rules are decided
// at start, so servedLater restarts configstamp once it is served. A resource name that does not match what the
// API server serves for the kind is an error: RBAC and webhook rules name it.
//
// canList (nil: no check) tries to list a served kind: one configstamp cannot
// list (RBAC not granted yet, a broken conversion webhook) would keep its
// cache from syncing, and so every replica from becoming ready. It is left
// out with an error in the log, among missing, and the other kinds are
// handled; servedLater restarts configstamp once it can list it.
func installedKinds(ctx context.Context, mapper meta.RESTMapper, cfg []workload.KindConfig, canList func(context.Context, workload.KindConfig) error,
	log logr.Logger) (installed []workload.Kind, missing []workload.KindConfig, err error) {
	for _, c := range cfg {
		m, err := mapper.RESTMapping(c.GVK().GroupKind(), c.Version)
		switch {
		case meta.IsNoMatchError(err):
			log.Info("kind not served by the API server (CRD not installed?): not handled until it is (configstamp then restarts)",
				"group", c.Group, "version", c.Version, "kind", c.Kind)
			missing = append(missing, c)
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("while looking up %s: %w", c.GVK(), err)
		case m.Resource.Resource != c.Resource:
			return nil, nil, fmt.Errorf("--kinds-config: %s is served as %q, not %q", c.GVK(), m.Resource.Resource, c.Resource)
		case m.Scope.Name() != meta.RESTScopeNameNamespace:
			return nil, nil, fmt.Errorf("--kinds-config: %s is cluster-scoped; configstamp handles namespaced kinds only", c.GVK())
		}
		if canList != nil {
			if err := canList(ctx, c); err != nil {
				log.Error(err, "cannot list an extra workload kind: not handled until it can (configstamp then restarts)",
					"group", c.Group, "version", c.Version, "kind", c.Kind)
				missing = append(missing, c)
				continue
			}
		}
		log.Info("handling an extra workload kind", "group", c.Group, "version", c.Version, "kind", c.Kind, "templatePath", c.TemplatePath,
			"followsProgress", c.Progress != nil)
		installed = append(installed, workload.Custom(c))
	}
	return installed, missing, nil
}

// errKindsServed ends the process when a configured kind that was missing at
// start is served: its caches, reconciler and webhook rules are made at
// start, so configstamp restarts (the kubelet starts it again) to handle it.
var errKindsServed = errors.New("a kind of --kinds-config not served at start is served now: restarting to handle it")

// servedLater watches, every interval, for the kinds of missing to be served
// (their CRD installed after configstamp started) and listable (canList, when
// set: RBAC granted, a conversion webhook repaired), and calls restart once
// one is. Every replica runs it: each must serve the new kind's webhook rules.
// A CRD that flaps (installed, removed, installed) must not restart every
// replica again and again, all at once: a kind counts as served only after
// stableChecks checks in a row, and each replica then waits a random part of
// an interval (jitter) and checks once more before it restarts, so the
// replicas go one after the other and the webhook keeps being served.
type servedLater struct {
	discovery discovery.DiscoveryInterface
	missing   []workload.KindConfig
	interval  time.Duration
	restart   func()
	log       logr.Logger
	// canList, when set, must also succeed for a kind to count as served.
	canList func(context.Context, workload.KindConfig) error
	// stableChecks is how many checks in a row must see a kind served (0: 3).
	stableChecks int
	// jitter returns the wait before restarting (nil: uniform in [0, interval)).
	jitter func(time.Duration) time.Duration
}

// Start polls until a missing kind is served steadily or ctx ends.
func (s *servedLater) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	seen := make([]int, len(s.missing))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for i, c := range s.missing {
			if !s.ready(ctx, c) {
				seen[i] = 0
				continue
			}
			if seen[i]++; seen[i] < cmp.Or(s.stableChecks, 3) {
				continue
			}
			wait := rand.N(s.interval)
			if s.jitter != nil {
				wait = s.jitter(s.interval)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			if !s.ready(ctx, c) { // it went again meanwhile: start over
				seen[i] = 0
				continue
			}
			s.log.Info("kind now served; restarting configstamp to handle it", "group", c.Group, "version", c.Version, "kind", c.Kind,
				"checks", seen[i], "after", wait.Round(time.Millisecond).String())
			s.restart()
			return nil
		}
	}
}

// ready reports whether c is served and, with canList, listable.
func (s *servedLater) ready(ctx context.Context, c workload.KindConfig) bool {
	return s.served(c) && (s.canList == nil || s.canList(ctx, c) == nil)
}

// served reports whether the API server serves c's resource in its group and
// version (discovery, not a cached mapping).
func (s *servedLater) served(c workload.KindConfig) bool {
	list, err := s.discovery.ServerResourcesForGroupVersion(schema.GroupVersion{Group: c.Group, Version: c.Version}.String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == c.Resource && r.Kind == c.Kind {
			return true
		}
	}
	return false
}

// NeedLeaderElection: every replica serves the webhook, so every replica restarts.
func (s *servedLater) NeedLeaderElection() bool { return false }

// kindsRBAC is the least RBAC configstamp needs for the extra kinds of cfg:
// get, list, watch and patch of exactly those resources (the built-in kinds'
// come from config/rbac). Cluster-wide, a ClusterRole bound to configstamp's
// ServiceAccount by the names config/rbac uses (kustomize prefixes and places
// them). For the namespaced install (namespaced), a Role and RoleBinding with
// no namespace, as config/namespaced/watched-role has, which each
// namespaces/<namespace> directory places: no cluster-wide right to the kind.
func kindsRBAC(cfg []workload.KindConfig, namespaced bool) ([]byte, error) {
	if len(cfg) == 0 {
		return nil, errors.New("--print-rbac needs --kinds-config with at least one kind")
	}
	var rules []rbacv1.PolicyRule
	byGroup := map[string]int{}
	for _, c := range cfg {
		i, ok := byGroup[c.Group]
		if !ok {
			i = len(rules)
			byGroup[c.Group] = i
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{c.Group}, Verbs: []string{"get", "list", "watch", "patch"}})
		}
		rules[i].Resources = append(rules[i].Resources, c.Resource)
	}
	meta := func(kind, name string) (metav1.TypeMeta, metav1.ObjectMeta) {
		return metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: kind}, metav1.ObjectMeta{Name: name}
	}
	ref := func(kind, name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: name}
	}
	var objs []any
	if namespaced {
		sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "configstamp-controller-manager", Namespace: "configstamp-system"}
		role, binding := rbacv1.Role{Rules: rules}, rbacv1.RoleBinding{RoleRef: ref("Role", "configstamp-kinds-role"), Subjects: []rbacv1.Subject{sa}}
		role.TypeMeta, role.ObjectMeta = meta("Role", "configstamp-kinds-role")
		binding.TypeMeta, binding.ObjectMeta = meta("RoleBinding", "configstamp-kinds-rolebinding")
		objs = []any{role, binding}
	} else {
		sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "controller-manager", Namespace: "system"}
		role, binding := rbacv1.ClusterRole{Rules: rules}, rbacv1.ClusterRoleBinding{RoleRef: ref("ClusterRole", "kinds-role"), Subjects: []rbacv1.Subject{sa}}
		role.TypeMeta, role.ObjectMeta = meta("ClusterRole", "kinds-role")
		binding.TypeMeta, binding.ObjectMeta = meta("ClusterRoleBinding", "kinds-rolebinding")
		objs = []any{role, binding}
	}
	out := []byte("# Generated by `configstamp --kinds-config=<file> --print-rbac` (make kinds-rbac); do not edit.\n")
	for i, obj := range objs {
		raw, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, raw...)
	}
	return out, nil
}

func printKindsRBAC(w io.Writer, cfg []workload.KindConfig, namespaced bool) error {
	raw, err := kindsRBAC(cfg, namespaced)
	if err != nil {
		return err
	}
	_, err = w.Write(raw)
	return err
}
