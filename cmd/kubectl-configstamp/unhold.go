package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/controllers/rollout"
	cswl "github.com/configstamp/configstamp/controllers/workload"
)

// unholdResult is one workload unhold put back.
type unholdResult struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// PutBack: the fields given back their value ([] when a user changed
	// them all since: only the annotation went).
	PutBack []string `json:"putBack"`
	// Error: why it could not be put back ("" when it was).
	Error string `json:"error,omitempty"`
}

// runUnhold puts back, on every workload of the namespace (-A: of every
// namespace), what configstamp set in its spec for a canary and names in
// configstamp.io/rollout-hold: each field still at the value configstamp
// set gets back the value it had (a field changed since stays as it is),
// and the annotation goes, in one JSON merge patch conditional on the
// version read. For uninstalling configstamp, once its Deployment is gone.
func runUnhold(ctx context.Context, o *options, _ []string) error {
	if err := o.connect(); err != nil {
		return err
	}
	out := []unholdResult{}
	for _, k := range o.registry.All() {
		list, err := o.dynamic.Resource(k.GVR()).Namespace(o.ns()).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue // an extra kind whose CRD is not installed
		}
		if err != nil {
			return fmt.Errorf("while listing %s: %w", k.Resource, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			if _, held := u.GetAnnotations()[rollout.AnnotationHold]; held {
				out = append(out, o.unhold(ctx, k, u))
			}
		}
	}
	if done, err := o.machine(out); done {
		return err
	}
	if len(out) == 0 {
		o.printf("no workload carries %s: nothing to put back\n", rollout.AnnotationHold)
		return nil
	}
	failed := 0
	for _, r := range out {
		w := strings.ToLower(r.Kind) + "/" + r.Name
		switch {
		case r.Error != "":
			failed++
			o.printf("%s in %s: not put back: %s\n", w, r.Namespace, r.Error)
		case len(r.PutBack) == 0:
			o.printf("%s in %s: every held field was changed since; %s removed\n", w, r.Namespace, rollout.AnnotationHold)
		default:
			o.printf("%s in %s: put back %s\n", w, r.Namespace, strings.Join(r.PutBack, ", "))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d workloads not put back", failed, len(out))
	}
	return nil
}

// unhold puts back u's hold (runUnhold).
func (o *options) unhold(ctx context.Context, k cswl.Kind, u *unstructured.Unstructured) unholdResult {
	r := unholdResult{Namespace: u.GetNamespace(), Kind: u.GetKind(), Name: u.GetName(), PutBack: []string{}}
	h, err := cswl.DecodeHold(u.GetAnnotations()[rollout.AnnotationHold])
	var back map[string]any
	if err == nil {
		back, err = h.RestorePatch(u)
	}
	if err != nil {
		r.Error = err.Error()
		return r
	}
	for _, f := range h {
		if fieldIn(back, f.Path) {
			r.PutBack = append(r.PutBack, f.Path)
		}
	}
	patch := map[string]any{"metadata": map[string]any{
		"annotations":     map[string]any{rollout.AnnotationHold: nil},
		"resourceVersion": u.GetResourceVersion(), // fail rather than put back over a newer write
	}}
	maps.Copy(patch, back) // the hold's fields are all under spec
	raw, err := json.Marshal(patch)
	if err == nil {
		_, err = o.dynamic.Resource(k.GVR()).Namespace(r.Namespace).Patch(ctx, r.Name, types.MergePatchType, raw, metav1.PatchOptions{FieldManager: "kubectl-configstamp"})
	}
	if err != nil {
		r.Error, r.PutBack = err.Error(), []string{}
	}
	return r
}

// fieldIn reports whether the merge patch m sets path (to null too).
func fieldIn(m map[string]any, path string) bool {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return false
		}
		m = next
	}
	_, ok := m[parts[len(parts)-1]]
	return ok
}
