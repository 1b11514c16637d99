package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// stampWatch follows the Deployments of one namespace through a watch: it
// remembers when each new template stamp was first seen, and the latest copy
// of each Deployment.
type stampWatch struct {
	mu      sync.Mutex
	history map[string][]stampSeen // by Deployment name, one entry per distinct stamp in a row
	latest  map[string]*appsv1.Deployment
	updated chan struct{} // closed and replaced on every event
	err     error
	stop    func()
}

type stampSeen struct {
	hash string
	at   time.Time
}

// watchStamps lists the namespace's Deployments and watches from there on.
func watchStamps(ctx context.Context, e *env, namespace string) (*stampWatch, error) {
	deployments := e.clientset.AppsV1().Deployments(namespace)
	list, err := deployments.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	w := &stampWatch{history: map[string][]stampSeen{}, latest: map[string]*appsv1.Deployment{}, updated: make(chan struct{})}
	now := time.Now()
	for i := range list.Items {
		w.record(&list.Items[i], now)
	}
	ctx, cancel := context.WithCancel(ctx)
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return deployments.Watch(ctx, opts)
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	w.stop = func() { cancel(); rw.Stop() }
	go func() {
		for ev := range rw.ResultChan() {
			at := time.Now()
			switch obj := ev.Object.(type) {
			case *appsv1.Deployment:
				w.record(obj, at)
			case *metav1.Status:
				if ev.Type == watch.Error {
					w.fail(fmt.Errorf("watching Deployments in %s: %s", namespace, obj.Message))
				}
			}
		}
	}()
	return w, nil
}

func (w *stampWatch) record(d *appsv1.Deployment, at time.Time) {
	hash := d.Spec.Template.Annotations[stamp.AnnotationHash]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.latest[d.Name] = d
	close(w.updated)
	w.updated = make(chan struct{})
	h := w.history[d.Name]
	if len(h) > 0 && h[len(h)-1].hash == hash {
		return
	}
	w.history[d.Name] = append(h, stampSeen{hash: hash, at: at})
}

func (w *stampWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	close(w.updated)
	w.updated = make(chan struct{})
}

// await waits, up to timeout, until done holds for the latest copies of the
// Deployments (read-only), re-checking it at every watch event; done also
// says how far it is, for the error.
func (w *stampWatch) await(ctx context.Context, what string, timeout time.Duration, done func(latest map[string]*appsv1.Deployment) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		updated, err := w.updated, w.err
		ok, progress := done(w.latest)
		w.mu.Unlock()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w", what, progress, ctx.Err())
		case <-updated:
		}
	}
}

// stamps returns the current stamp of every Deployment seen.
func (w *stampWatch) stamps() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.history))
	for name, h := range w.history {
		out[name] = h[len(h)-1].hash
	}
	return out
}

// changedSince returns, for each name, when a stamp other than from[name] was
// first seen after the stamp from[name]; names not changed yet are missing;
// w.mu held.
func (w *stampWatch) changedSince(from map[string]string, names []string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, name := range names {
		h := w.history[name]
		for i := len(h) - 1; i >= 0; i-- { // the latest occurrence of the old stamp
			if h[i].hash == from[name] {
				if i+1 < len(h) {
					out[name] = h[i+1].at
				}
				break
			}
		}
	}
	return out
}

// waitChanged waits until every name has a stamp other than from[name] and
// returns when each changed.
func (w *stampWatch) waitChanged(ctx context.Context, from map[string]string, names []string, timeout time.Duration) (map[string]time.Time, error) {
	var got map[string]time.Time
	err := w.await(ctx, "Deployments restamped", timeout, func(map[string]*appsv1.Deployment) (bool, string) {
		got = w.changedSince(from, names)
		return len(got) == len(names), fmt.Sprintf("%d of %d", len(got), len(names))
	})
	return got, err
}
