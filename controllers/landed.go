package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// landedReadTimeout bounds the live read that settles a write whose outcome
// is unknown.
const landedReadTimeout = 10 * time.Second

// landed settles a patch of obj's annotations meta that returned err. A
// conflict or a missing object is a definite answer: nothing was written.
// Any other error (the request's deadline passed while the response was
// read — a fenced write's deadline is the lease's —, a broken connection, a
// server timeout) may come after the API server applied the patch: obj is
// then read live, and if it carries every annotation of meta as written,
// the patch landed. landed returns the live object then, and a nil error;
// otherwise nil and err. A write that landed must be told as one (its
// events, its metrics, its slot kept), or a rollout starts unannounced.
func (r *kindReconciler) landed(ctx context.Context, obj client.Object, meta map[string]any, err error) (client.Object, error) {
	if err == nil || r.APIReader == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, err
	}
	// The write's context may be what ran out (the lease's deadline): the
	// read gets its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landedReadTimeout)
	defer cancel()
	live := r.Kind.New()
	if rerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); rerr != nil {
		return nil, err
	}
	got := live.GetAnnotations()
	for k, v := range meta {
		have, ok := got[k]
		switch v := v.(type) {
		case nil:
			if ok {
				return nil, err
			}
		case string:
			if !ok || have != v {
				return nil, err
			}
		default:
			return nil, err
		}
	}
	log.FromContext(ctx).Info("a write reported an error, yet the API server applied it", "error", err.Error())
	return live, nil
}
