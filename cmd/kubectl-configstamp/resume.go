package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/controllers/rollout"
)

type resumeResult struct {
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Lifted    []change `json:"lifted"`
	// StillHaltedBy are the other workloads of the namespace whose halts
	// hold a change of the same sources: the waiting workloads roll only
	// once those are lifted too.
	StillHaltedBy []string `json:"stillHaltedBy"`
}

func runResume(ctx context.Context, o *options, args []string) error {
	w, ns, err := o.oneWorkload(ctx, args[0], "resume acts on")
	if err != nil {
		return err
	}
	name := w.meta.Name
	res := resumeResult{Namespace: ns, Kind: w.kind, Name: name, Lifted: changes(w.meta.Annotations[rollout.AnnotationHalted])}
	if _, halted := w.meta.Annotations[rollout.AnnotationHalted]; halted {
		// A JSON merge patch of the one annotation, as `kubectl annotate NAME configstamp.io/halted-`.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations":     map[string]any{rollout.AnnotationHalted: nil},
			"resourceVersion": w.meta.ResourceVersion, // fail rather than lift a halt that changed meanwhile
		}})
		if err != nil {
			return err
		}
		k, _, _ := o.parseWorkloadArg(args[0])
		_, err = o.dynamic.Resource(k.GVR()).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-configstamp"})
		if err != nil {
			return fmt.Errorf("while removing %s from %s %s/%s: %w", rollout.AnnotationHalted, w.kind, ns, name, err)
		}
	}
	if res.StillHaltedBy, err = o.otherHalts(ctx, ns, name, res.Lifted); err != nil {
		return err
	}
	if done, err := o.machine(res); done {
		return err
	}
	if len(res.Lifted) == 0 {
		o.printf("%s in %s is not halted: nothing to resume\n", w.ref(), ns)
		return nil
	}
	if len(res.StillHaltedBy) > 0 {
		verb := "halts"
		if len(res.StillHaltedBy) > 1 {
			verb = "halt"
		}
		o.printf("%s in %s: its halt of %s is lifted, but %s still %s a change of the same source; the waiting workloads roll only once that is resumed too\n",
			w.ref(), ns, changesText(res.Lifted), strings.Join(res.StillHaltedBy, ", "), verb)
		return nil
	}
	o.printf("%s in %s resumed: the halt of %s is lifted; configstamp rolls the workloads waiting on it\n", w.ref(), ns, changesText(res.Lifted))
	return nil
}

// otherHalts returns the workloads of ns other than name that halt a change
// of one of the sources of lifted.
func (o *options) otherHalts(ctx context.Context, ns, name string, lifted []change) ([]string, error) {
	out := []string{}
	if len(lifted) == 0 {
		return out, nil
	}
	ws, err := o.listWorkloads(ctx, ns)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if w.meta.Name == name {
			continue
		}
		for _, ch := range changes(w.meta.Annotations[rollout.AnnotationHalted]) {
			if slices.ContainsFunc(lifted, func(l change) bool { return l.Source == ch.Source }) {
				out = append(out, w.ref())
				break
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
