package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/hashkey"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Adopter takes over, once per installation, the rollout records the
// previous release wrote without a seal: before it, an unsealed record was
// configstamp's; after it, only a sealed one is. It runs on the leader before
// any reconcile (the reconcilers wait for Done), so an in-flight rollout of
// the previous release keeps its slot and a halt it wrote keeps holding:
//
//   - the state and start time are kept (a rolling record counts against the
//     budget until it ends, as it did);
//   - the change ids (rollout-cause, halted) are written again as this
//     release's keyed, key-precise digests of what the workload references
//     now, when its stamp shows that this is the content its record is about
//     (the stamp equals the hash computed now); otherwise they are dropped —
//     a halt whose content was fixed since would have been lifted. So no id
//     the previous release wrote (unkeyed ones included) is left behind.
//
// Then it marks the key Secret (hashkey.AnnotationRecordsSealed), so it never runs
// again and an unsealed record written later counts for nothing.
type Adopter struct {
	Client client.Client
	// Reader reads the key Secret live (the cache keeps Secrets as digests).
	Reader   client.Reader
	Resolver *workload.Resolver
	Scope    *workload.Scope
	// Kinds are the kinds of workloads whose records are taken over.
	Kinds *workload.Registry
	// KeySecret is the key Secret, which the Adopter marks.
	KeySecret hashkey.Secret
	// Done is closed once the records are taken over (or were already).
	Done chan struct{}
	Log  logr.Logger
}

// NeedLeaderElection: only the leader writes records.
func (a *Adopter) NeedLeaderElection() bool { return true }

// Start takes the records over, marks the Secret and closes Done.
func (a *Adopter) Start(ctx context.Context) error {
	sealed, err := a.KeySecret.RecordsSealed(ctx, a.Reader)
	if err != nil {
		return err
	}
	if !sealed {
		n, err := a.adoptAll(ctx)
		if err != nil {
			return err
		}
		if err := a.mark(ctx); err != nil {
			return err
		}
		a.Log.Info("took over the rollout records of the previous release", "records", n)
	}
	close(a.Done)
	return nil
}

func (a *Adopter) adoptAll(ctx context.Context) (int, error) {
	n := 0
	for _, kind := range a.Kinds.All() {
		list := kind.NewList()
		if err := a.Client.List(ctx, list); err != nil {
			return n, fmt.Errorf("while listing %s to take over their records: %w", kind.Resource, err)
		}
		for _, obj := range kind.Items(list) {
			adopted, err := a.adopt(ctx, kind, obj)
			if err != nil {
				return n, err
			}
			if adopted {
				n++
			}
		}
	}
	return n, nil
}

// adopt seals obj's unsealed record, on the version of obj it was computed
// from (a resourceVersion precondition: a user's resume in between is not
// undone); on a conflict it starts again from a live read, a few times. A
// patch the API server refuses is logged and skipped: that record counts for
// nothing, and the other workloads are still taken over.
func (a *Adopter) adopt(ctx context.Context, kind workload.Kind, obj client.Object) (bool, error) {
	for range 3 {
		meta, err := a.record(ctx, kind, obj)
		if meta == nil || err != nil {
			return false, err
		}
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "annotations": meta}})
		if err != nil {
			return false, err
		}
		err = a.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager))
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			a.Log.Error(err, "while taking over a record; it counts for nothing", "namespace", obj.GetNamespace(), "name", obj.GetName())
			return false, nil
		}
		if err := a.Reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, client.IgnoreNotFound(err)
		}
	}
	a.Log.Info("record kept changing while being taken over; it counts for nothing", "namespace", obj.GetNamespace(), "name", obj.GetName())
	return false, nil
}

// record is the sealed record replacing obj's unsealed one, or nil. A
// workload over stamp.MaxReferences keeps its state and its halts, whose
// content cannot be computed ("unknown": such a halt holds until resumed).
func (a *Adopter) record(ctx context.Context, kind workload.Kind, obj client.Object) (map[string]any, error) {
	ann := obj.GetAnnotations()
	if _, sealed := ann[rollout.AnnotationSeal]; sealed {
		return nil, nil
	}
	old := rollout.Read(ann)
	tmpl := kind.PodTemplate(obj)
	if (old.State == rollout.None && old.Halted == "" && old.Started.IsZero()) || tmpl == nil || !a.inScope(ctx, obj.GetNamespace()) {
		return nil, nil
	}
	comp, err := a.Resolver.Compute(ctx, obj.GetNamespace(), ann, tmpl)
	tooMany := (*workload.TooManyReferences)(nil)
	switch {
	case errors.As(err, &tooMany):
		comp = &workload.Computation{Hasher: a.Resolver.Keys.Current()}
	case err != nil:
		return nil, fmt.Errorf("while taking over the record of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	current := tooMany == nil && tmpl.Annotations[stamp.AnnotationHash] == comp.Hash
	again := func(changes string) string {
		var out []rollout.Change
		for _, c := range rollout.ParseChanges(changes) {
			switch d, ok := comp.Sources[c.Ref]; {
			case tooMany != nil:
				out = append(out, rollout.Change{Ref: c.Ref, Content: "unknown"})
			case ok && current:
				out = append(out, rollout.Change{Ref: c.Ref, Content: d})
			}
		}
		return rollout.FormatChanges(out)
	}
	rec := rollout.Record{State: old.State, Started: old.Started, Cause: again(old.Cause), Halted: again(old.Halted)}
	switch {
	case rec.State == rollout.None && old.Halted != "": // a halt from before rollout-state
		rec.State = rollout.Failed
	case rec.State == rollout.None: // a record from before rollout-state: ended
		rec.State = rollout.Completed
	}
	return rec.Annotations(obj.GetUID(), comp.Hasher), nil
}

func (a *Adopter) inScope(ctx context.Context, namespace string) bool {
	if a.Scope == nil {
		return true
	}
	ns := &corev1.Namespace{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false
	}
	return a.Scope.InScope(ns.Name, ns.Labels)
}

// mark sets hashkey.AnnotationRecordsSealed on the key Secret, trying again every
// second until it is written or ctx ends.
func (a *Adopter) mark(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := a.KeySecret.MarkRecordsSealed(ctx, a.Reader, a.Client); err != nil {
			a.Log.Error(err, "while marking the hash key secret; trying again")
			return false, nil
		}
		return true, nil
	})
}
