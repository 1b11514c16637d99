// Package live is the webhook's reader of ConfigMaps and Secrets: consistent
// reads from the API server, bounded, and shared between concurrent
// admissions where sharing cannot make one of them see older data.
//
// The webhook reads what a template references live, not from the cache, so
// that a ConfigMap applied a moment before its Deployment is seen (a stamp
// from a stale cache would be corrected by the reconciler a moment later: a
// second, surprise rollout). A GET without a resourceVersion is linearizable:
// it sees every write that completed before it was sent. So a read sent after
// an admission arrived is as good for that admission as a read of its own,
// whoever asked for it. A burst of Deployments that share one ConfigMap then
// costs one GET of it per round trip, not one per Deployment.
//
// Arrive marks when an admission arrived; Reader.Get joins a read of the same
// object that is not yet sent, or was sent after the caller arrived, and
// otherwise sends a new one.
package live

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults: DefaultReads bounds the reads in flight of all admissions
// together, so that no burst or workload can make configstamp fire thousands
// of GETs at the API server at once; DefaultTimeout bounds one read.
const (
	DefaultReads   = 32
	DefaultTimeout = 10 * time.Second
)

// clock orders arrivals and reads: a read whose tick is above an arrival's
// was sent after that admission arrived.
var clock atomic.Uint64

type arrivalKey struct{}

// Arrive returns ctx marked with the moment it is called: a read shared by
// Reader.Get on this context was sent after it.
func Arrive(ctx context.Context) context.Context {
	return context.WithValue(ctx, arrivalKey{}, clock.Add(1))
}

// Arrived reports whether ctx carries Arrive's mark.
func Arrived(ctx context.Context) bool {
	_, ok := ctx.Value(arrivalKey{}).(uint64)
	return ok
}

// arrival is ctx's mark, or now when it has none.
func arrival(ctx context.Context) uint64 {
	if t, ok := ctx.Value(arrivalKey{}).(uint64); ok {
		return t
	}
	return clock.Add(1)
}

// Reader reads objects from Reader (a client that reads the API server, not a
// cache). Get shares reads as the package says; List passes through unshared.
//
// Callers of one shared read share the object's maps and slices (data,
// labels, annotations): each gets its own struct, and must not write into
// them. So a burst of admissions that reference one 1 MiB Secret holds one
// copy of it, not one per admission (nothing configstamp does with a source
// writes into it; pin.Memo keeps a deep copy).
type Reader struct {
	client.Reader
	// MaxReads bounds the reads in flight; 0 is DefaultReads. Read once, at
	// the first Get.
	MaxReads int
	// Timeout bounds one shared read from the moment it is sent, whoever
	// waits for it; 0 is DefaultTimeout.
	Timeout time.Duration

	once    sync.Once
	slots   chan struct{}
	mu      sync.Mutex
	flights map[flightKey]*flight
}

type flightKey struct {
	typ reflect.Type
	key client.ObjectKey
}

// flight is one read and the callers waiting for it.
type flight struct {
	done chan struct{}
	// cancel ends the read (nobody waits any more) or releases its context.
	cancel context.CancelFunc
	// sent is the clock's tick when the read was sent, 0 until then; waiters
	// is how many callers still wait. Both under Reader.mu.
	sent    uint64
	waiters int
	// obj and err are the outcome, set before done is closed.
	obj client.Object
	err error
}

func (r *Reader) init() {
	r.once.Do(func() {
		r.slots = make(chan struct{}, cmp.Or(r.MaxReads, DefaultReads))
		r.flights = map[flightKey]*flight{}
	})
}

// Get reads key into obj: through a read of the same object sent after ctx's
// Arrive (or not sent yet), else a new one. obj's maps and slices are shared
// with the other callers of that read: read them, never write into them.
// With options, or for an object that carries its kind (unstructured, partial
// metadata), the read is the caller's own.
func (r *Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.init()
	if !obj.GetObjectKind().GroupVersionKind().Empty() || len(opts) > 0 {
		return r.own(ctx, key, obj, opts)
	}
	k := flightKey{typ: reflect.TypeOf(obj), key: key}
	f := r.join(ctx, k, arrival(ctx))
	select {
	case <-f.done:
	case <-ctx.Done():
		r.leave(k, f)
		return fmt.Errorf("while waiting to read %s: %w", key, ctx.Err())
	}
	if f.err != nil {
		return f.err
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(f.obj).Elem()) // the struct only
	return nil
}

// join returns the flight of k that a caller who arrived at tick may share,
// starting one when there is none.
func (r *Reader) join(ctx context.Context, k flightKey, tick uint64) *flight {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.flights[k]
	if f == nil || f.sent != 0 && f.sent < tick {
		flightCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		r.flights[k] = f
		obj := reflect.New(k.typ.Elem()).Interface().(client.Object)
		go r.fly(flightCtx, k, f, obj)
	}
	f.waiters++
	return f
}

// leave is a caller giving up on f. When it was the last, the read is
// cancelled, sent or not, and nobody can join it any more.
func (r *Reader) leave(k flightKey, f *flight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.waiters--; f.waiters == 0 {
		if r.flights[k] == f {
			delete(r.flights, k)
		}
		f.cancel()
	}
}

// fly sends f's read once a slot is free, unless everyone left (ctx ends).
// The timeout runs from the moment it is sent.
func (r *Reader) fly(ctx context.Context, k flightKey, f *flight, obj client.Object) {
	defer f.cancel()
	defer r.land(k, f)
	if f.err = r.acquire(ctx, k.key); f.err != nil {
		return
	}
	defer r.release()
	r.mu.Lock()
	if err := ctx.Err(); err != nil { // everyone left: nobody can join it now
		r.mu.Unlock()
		f.err = fmt.Errorf("while waiting to read %s: %w", k.key, err)
		return
	}
	f.sent = clock.Add(1)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, DefaultTimeout))
	defer cancel()
	f.err = r.Reader.Get(ctx, k.key, obj)
	f.obj = obj
}

// land ends f: later callers start a read of their own.
func (r *Reader) land(k flightKey, f *flight) {
	r.mu.Lock()
	if r.flights[k] == f {
		delete(r.flights, k)
	}
	r.mu.Unlock()
	close(f.done)
}

// own is a read of the caller's own, within the bound.
func (r *Reader) own(ctx context.Context, key client.ObjectKey, obj client.Object, opts []client.GetOption) error {
	if err := r.acquire(ctx, key); err != nil {
		return err
	}
	defer r.release()
	return r.Reader.Get(ctx, key, obj, opts...)
}

// acquire takes one of the slots to read key, unless ctx ends first.
func (r *Reader) acquire(ctx context.Context, key client.ObjectKey) error {
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("while waiting to read %s: %w", key, ctx.Err())
	}
}

// release gives back a slot acquire took.
func (r *Reader) release() { <-r.slots }
