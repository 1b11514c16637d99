package controllers

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// Then it marks the key Secret (AnnotationRecordsSealed), so it never runs
// again and an unsealed record written later counts for nothing.
type Adopter struct {
	Client client.Client
	// Reader reads the key Secret live (the cache keeps Secrets as digests).
	Reader   client.Reader
	Resolver *workload.Resolver
	Scope    *workload.Scope
	// Namespace and KeySecret name the key Secret.
	Namespace, KeySecret string
	// Done is closed once the records are taken over (or were already).
	Done chan struct{}
	Log  logr.Logger
}

// NeedLeaderElection: only the leader writes records.
func (a *Adopter) NeedLeaderElection() bool { return true }

// Start takes the records over, marks the Secret and closes Done.
func (a *Adopter) Start(ctx context.Context) error {
	secret := &corev1.Secret{}
	if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.KeySecret}, secret); err != nil {
		return fmt.Errorf("while reading the hash key secret: %w", err)
	}
	if secret.Annotations[AnnotationRecordsSealed] == "" {
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
	for _, kind := range workload.Kinds {
		list := kind.NewList()
		if err := a.Client.List(ctx, list); err != nil {
			return n, fmt.Errorf("while listing %s to take over their records: %w", kind.Resource, err)
		}
		for _, obj := range kind.Items(list) {
			meta := a.record(ctx, obj)
			if meta == nil {
				continue
			}
			if err := patchAnnotations(ctx, a.Client, obj, meta, nil); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// record is the sealed record replacing obj's unsealed one, or nil.
func (a *Adopter) record(ctx context.Context, obj client.Object) map[string]any {
	ann := obj.GetAnnotations()
	if _, sealed := ann[rollout.AnnotationSeal]; sealed {
		return nil
	}
	old := rollout.Read(ann)
	tmpl := workload.PodTemplate(obj)
	if (old.State == rollout.None && old.Halted == "" && old.Started.IsZero()) || tmpl == nil || !a.inScope(ctx, obj.GetNamespace()) {
		return nil
	}
	comp, err := a.Resolver.Compute(ctx, obj.GetNamespace(), ann, tmpl)
	if err != nil {
		a.Log.Error(err, "while taking over a record; it counts for nothing", "namespace", obj.GetNamespace(), "name", obj.GetName())
		return nil
	}
	current := tmpl.Annotations[stamp.AnnotationHash] == comp.Hash
	again := func(changes string) string {
		var out []rollout.Change
		for _, c := range rollout.ParseChanges(changes) {
			if d, ok := comp.Sources[c.Ref]; ok && current {
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
	return rec.Annotations(obj.GetUID(), comp.Hasher)
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

// mark sets AnnotationRecordsSealed on the key Secret.
func (a *Adopter) mark(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret := &corev1.Secret{}
		if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.KeySecret}, secret); err != nil {
			return err
		}
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[AnnotationRecordsSealed] = "true"
		return a.Client.Update(ctx, secret)
	})
}
