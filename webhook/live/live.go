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
// otherwise sends a new one. The sharing itself, which knows nothing of
// Kubernetes, is package flight.
package live

import (
	"context"
	"reflect"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/webhook/live/flight"
)

// Defaults: DefaultReads bounds the reads in flight of all admissions
// together, so that no burst or workload can make configstamp fire thousands
// of GETs at the API server at once; DefaultTimeout bounds one read.
const (
	DefaultReads   = flight.DefaultReads
	DefaultTimeout = flight.DefaultTimeout
)

// Arrive returns ctx marked with the moment it is called: a read shared by
// Reader.Get on this context was sent after it.
func Arrive(ctx context.Context) context.Context { return flight.Arrive(ctx) }

// Arrived reports whether ctx carries Arrive's mark.
func Arrived(ctx context.Context) bool { return flight.Arrived(ctx) }

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

	once  sync.Once
	reads *flight.Group[flightKey, client.Object]
}

// flightKey is what a shared read reads: an object of one Go type.
type flightKey struct {
	typ reflect.Type
	key client.ObjectKey
}

func (k flightKey) String() string { return k.key.String() }

func (r *Reader) init() {
	r.once.Do(func() {
		r.reads = &flight.Group[flightKey, client.Object]{MaxReads: r.MaxReads, Timeout: r.Timeout}
	})
}

// Get reads key into obj: through a read of the same object sent after ctx's
// Arrive (or not sent yet), else a new one. obj's maps and slices are shared
// with the other callers of that read: read them, never write into them.
// With options, or for an object that carries its kind (unstructured, partial
// metadata), the read is the caller's own.
func (r *Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.init()
	k := flightKey{typ: reflect.TypeOf(obj), key: key}
	if !obj.GetObjectKind().GroupVersionKind().Empty() || len(opts) > 0 {
		return r.reads.Own(ctx, k, func(ctx context.Context) error { return r.Reader.Get(ctx, key, obj, opts...) })
	}
	shared, err := r.reads.Do(ctx, k, func(ctx context.Context) (client.Object, error) {
		into := reflect.New(k.typ.Elem()).Interface().(client.Object)
		return into, r.Reader.Get(ctx, key, into)
	})
	if err != nil {
		return err
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(shared).Elem()) // the struct only
	return nil
}
