package main

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configstamp/configstamp/controllers/stamp"
)

var sourceResources = map[stamp.Kind]schema.GroupVersionResource{
	stamp.KindConfigMap: {Version: "v1", Resource: "configmaps"},
	stamp.KindSecret:    {Version: "v1", Resource: "secrets"},
}

// sourceMeta is the metadata of one ConfigMap or Secret (read through the
// metadata API: never a Secret's data).
type sourceMeta struct {
	ref         stamp.ObjectRef
	namespace   string
	annotations map[string]string
}

// selectorSources lists the ConfigMaps and Secrets of ns ("" every namespace)
// that carry a rollout selector, metadata only.
func (o *options) selectorSources(ctx context.Context, ns string) ([]sourceMeta, error) {
	var out []sourceMeta
	for _, kind := range []stamp.Kind{stamp.KindConfigMap, stamp.KindSecret} {
		list, err := o.meta.Resource(sourceResources[kind]).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("while listing the metadata of %ss: %w", kind, err)
		}
		for _, item := range list.Items {
			if _, ok, _ := stamp.RolloutSelector(item.Annotations); ok {
				out = append(out, sourceMeta{ref: stamp.ObjectRef{Kind: kind, Name: item.Name}, namespace: item.Namespace, annotations: item.Annotations})
			}
		}
	}
	return out, nil
}

// sourceAnnotations reads the annotations of a ConfigMap or Secret (metadata
// only); exists is false when it does not exist.
func (o *options) sourceAnnotations(ctx context.Context, ns string, ref stamp.ObjectRef) (map[string]string, bool, error) {
	m, err := o.sourceMetadata(ctx, ns, ref)
	if m == nil || err != nil {
		return nil, false, err
	}
	return m.Annotations, true, nil
}

// sourceMetadata reads a ConfigMap or Secret, metadata only; nil when it
// does not exist.
func (o *options) sourceMetadata(ctx context.Context, ns string, ref stamp.ObjectRef) (*metav1.PartialObjectMetadata, error) {
	m, err := o.meta.Resource(sourceResources[ref.Kind]).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while reading %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	return m, nil
}

// referenceUse is one way a workload references the object.
type referenceUse struct {
	Via     string   `json:"via"`
	Where   string   `json:"where,omitempty"`
	AllKeys bool     `json:"allKeys"`
	Keys    []string `json:"keys,omitempty"`
}

// user is one workload that references the object.
type user struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	OptedIn   bool   `json:"optedIn"`
	// Rolls: a change of the referenced keys rolls it (configstamp handles the
	// workload, opted in or matched by a rollout selector, and the object is
	// not ignored).
	Rolls      bool           `json:"rolls"`
	AllKeys    bool           `json:"allKeys"`
	Keys       []string       `json:"keys,omitempty"`
	References []referenceUse `json:"references"`
}

type whoUsesResult struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Namespace is empty with -A.
	Namespace string `json:"namespace,omitempty"`
	Workloads []user `json:"workloads"`
}

// sourceState is what who-uses reads of the target in one namespace.
type sourceState struct {
	annotations map[string]string
	exists      bool
}

// runWhoUses lists the workloads that reference a ConfigMap or Secret: find
// them, say what the target is, print them.
func runWhoUses(ctx context.Context, o *options, args []string) error {
	target, err := parseSourceArg(args[0])
	if err != nil {
		return err
	}
	if err := o.connect(); err != nil {
		return err
	}
	ns := o.ns()
	res, states, err := findUsers(ctx, o, target, ns)
	if err != nil {
		return err
	}
	if done, err := o.machine(res); done {
		return err
	}
	line, err := targetSummary(ctx, o, target, ns, len(res.Workloads), states)
	if err != nil {
		return err
	}
	o.printf("%s\n", line)
	if len(res.Workloads) > 0 {
		printUsers(o, res, ns)
	}
	return nil
}

// findUsers returns the workloads of ns ("" every namespace) that reference
// target, and what was read of target in each of their namespaces.
func findUsers(ctx context.Context, o *options, target stamp.ObjectRef, ns string) (whoUsesResult, map[string]sourceState, error) {
	res := whoUsesResult{Kind: string(target.Kind), Name: target.Name, Namespace: ns, Workloads: []user{}}
	ws, err := o.listWorkloads(ctx, ns)
	if err != nil {
		return res, nil, err
	}
	selectors, err := o.selectorSources(ctx, ns)
	if err != nil {
		return res, nil, err
	}
	nsl := &namespaceLabels{o: o}
	states := map[string]sourceState{} // the target's annotations per namespace (ignore, its own selector)
	for _, w := range ws {
		wns := w.meta.Namespace
		st, ok := states[wns]
		if !ok {
			a, exists, err := o.sourceAnnotations(ctx, wns, target)
			if err != nil {
				return res, nil, err
			}
			st = sourceState{a, exists}
			states[wns] = st
		}
		if u, ok := userOf(ctx, w, target, selectors, st, nsl); ok {
			res.Workloads = append(res.Workloads, u)
		}
	}
	return res, states, nil
}

// userOf is how workload w references target, directly or through a
// rollout selector (ok false: it does not).
func userOf(ctx context.Context, w workload, target stamp.ObjectRef, selectors []sourceMeta, st sourceState, nsl *namespaceLabels) (user, bool) {
	wns := w.meta.Namespace
	u := user{Namespace: wns, Kind: w.kind, Name: w.meta.Name, References: []referenceUse{}}
	var keys []string
	var keysSet bool
	for _, r := range w.references() {
		if r.Ref != target {
			continue
		}
		u.References = append(u.References, referenceUse{Via: string(r.Via), Where: r.Where, AllKeys: r.Keys == nil, Keys: r.Keys})
		keys, keysSet = mergeKeys(keys, keysSet, r.Keys)
	}
	selected := false
	for _, s := range selectors {
		if s.namespace != wns {
			continue
		}
		sel, ok := w.selectedBy(s.annotations)
		if !ok {
			continue
		}
		selected = true
		if s.ref == target {
			u.References = append(u.References, referenceUse{Via: string(stamp.ViaSelector), Where: sel, AllKeys: true})
			keys, keysSet = mergeKeys(keys, keysSet, nil)
		}
	}
	if len(u.References) == 0 {
		return u, false
	}
	ignored, _ := stamp.Ignored(st.annotations)
	u.OptedIn = w.optedIn(nsl.get(ctx, wns))
	u.Rolls = (u.OptedIn || selected) && !ignored
	u.AllKeys, u.Keys = keys == nil, keys
	return u, true
}

// targetSummary is the line that says how many workloads reference target
// and, in one namespace, whether it exists or is ignored.
func targetSummary(ctx context.Context, o *options, target stamp.ObjectRef, ns string, n int, states map[string]sourceState) (string, error) {
	where := ns + "/" + target.Name
	if ns == "" {
		where = target.Name + " in every namespace"
	}
	line := fmt.Sprintf("%s %s: %d workload(s) reference it", target.Kind, where, n)
	if ns == "" {
		return line, nil
	}
	st, ok := states[ns]
	if !ok {
		a, exists, err := o.sourceAnnotations(ctx, ns, target)
		if err != nil {
			return "", err
		}
		st = sourceState{a, exists}
	}
	if !st.exists {
		line += "; it does not exist (counted as absent: its creation rolls them once)"
	} else if ignored, _ := stamp.Ignored(st.annotations); ignored {
		line += "; it is ignored (" + stamp.AnnotationIgnore + "), so no change of it rolls anything"
	}
	return line, nil
}

// printUsers prints the table of the workloads that reference the target.
func printUsers(o *options, res whoUsesResult, ns string) {
	head := []string{"WORKLOAD", "OPTED-IN", "ROLLS", "VIA", "KEYS"}
	if ns == "" {
		head = append([]string{"NAMESPACE"}, head...)
	}
	if o.wide() {
		head = append(head, "WHERE")
	}
	rows := [][]cell{header(head...)}
	for _, u := range res.Workloads {
		var vias, wheres []string
		for _, r := range u.References {
			vias = append(vias, r.Via)
			wheres = append(wheres, r.Via+":"+r.Where)
		}
		rolls := coloured("no", "")
		if u.Rolls {
			rolls = coloured("yes", yellow)
		}
		keys := u.Keys
		if u.AllKeys {
			keys = nil
		}
		row := []cell{c(strings.ToLower(u.Kind) + "/" + u.Name), c(yesNo(u.OptedIn)), rolls, c(strings.Join(dedupe(vias), ",")), c(keysText(keys))}
		if ns == "" {
			row = append([]cell{c(u.Namespace)}, row...)
		}
		if o.wide() {
			row = append(row, c(strings.Join(wheres, " ")))
		}
		rows = append(rows, row)
	}
	o.table(rows)
}

// dedupe drops repeated strings, keeping the first order.
func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
