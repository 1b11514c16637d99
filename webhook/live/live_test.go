package live

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// apiServer stands for the API server: a Get sees the data as it is when the
// Get is sent, and answers when the gate opens. "missing" does not exist.
type apiServer struct {
	gate     chan struct{}
	data     atomic.Value // string
	gets     atomic.Int64
	inFlight atomic.Int64
	most     atomic.Int64
}

func newAPIServer(data string) *apiServer {
	a := &apiServer{gate: make(chan struct{})}
	a.data.Store(data)
	return a
}

func (a *apiServer) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	a.gets.Add(1)
	seen := a.data.Load().(string)
	n := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
	}
	select {
	case <-a.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	if key.Name == "missing" {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	cm := obj.(*corev1.ConfigMap)
	cm.Name, cm.Namespace, cm.Data = key.Name, key.Namespace, map[string]string{"v": seen}
	return nil
}

func (a *apiServer) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// waitFor polls cond until it holds or 10 s have passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waiting is how many callers wait for the read of ConfigMap name.
func (r *Reader) waiting(name string) int {
	r.init()
	return r.reads.Waiting(flightKey{typ: reflect.TypeFor[*corev1.ConfigMap](), key: client.ObjectKey{Namespace: "ns", Name: name}})
}

type got struct {
	cm  *corev1.ConfigMap
	err error
}

// admit is one admission arriving now and reading name in the background.
func admit(ctx context.Context, r *Reader, name string) chan got {
	return read(Arrive(ctx), r, name)
}

// read is an admission that arrived at ctx reading name in the background.
func read(ctx context.Context, r *Reader, name string) chan got {
	out := make(chan got, 1)
	go func() {
		cm := &corev1.ConfigMap{}
		err := r.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, cm)
		out <- got{cm, err}
	}()
	return out
}

// TestConcurrentAdmissionsShareOneRead: 20 admissions that arrive before the
// read of a shared ConfigMap is answered cost one GET and hold one copy of its
// data (each its own struct); a missing object is NotFound to each.
func TestConcurrentAdmissionsShareOneRead(t *testing.T) {
	for _, name := range []string{"shared", "missing"} {
		t.Run(name, func(t *testing.T) {
			api := newAPIServer("v1")
			r := &Reader{Reader: api}
			var arrived []context.Context
			for range 20 {
				arrived = append(arrived, Arrive(t.Context()))
			}
			var outs []chan got
			for _, ctx := range arrived {
				outs = append(outs, read(ctx, r, name))
			}
			waitFor(t, "20 admissions waiting", func() bool { return r.waiting(name) == 20 })
			close(api.gate)
			var first *corev1.ConfigMap
			for _, out := range outs {
				g := <-out
				if name == "missing" {
					if !apierrors.IsNotFound(g.err) {
						t.Fatalf("Get of a missing ConfigMap: %v, want NotFound", g.err)
					}
					continue
				}
				if g.err != nil || g.cm.Data["v"] != "v1" {
					t.Fatalf("Get: %v %v, want v1", g.err, g.cm.Data)
				}
				if first == nil {
					first = g.cm
					first.Name = "renamed by its reader" // its own struct
					continue
				}
				if g.cm.Name != "shared" {
					t.Fatalf("another admission's struct changed: name %q", g.cm.Name)
				}
				if reflect.ValueOf(g.cm.Data).UnsafePointer() != reflect.ValueOf(first.Data).UnsafePointer() {
					t.Fatalf("each admission holds a copy of the data: a burst referencing a 1 MiB Secret would hold one per admission")
				}
			}
			if n := api.gets.Load(); n != 1 {
				t.Errorf("20 admissions sent %d GETs, want 1", n)
			}
		})
	}
}

// The rules of sharing (a read sent before an admission arrived is not
// shared, the bound, callers giving up, the timeout) are package flight's,
// tested there, under the race detector too.

// TestOwnReadsAreNotShared: a Get with options, or of an object that carries
// its kind, is the caller's own read (flight.Group.Own): two at once send two
// GETs.
func TestOwnReadsAreNotShared(t *testing.T) {
	api := newAPIServer("v1")
	r := &Reader{Reader: api}
	outs := make(chan error, 2)
	go func() {
		outs <- r.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "cm"}, &corev1.ConfigMap{}, &client.GetOptions{})
	}()
	go func() {
		withKind := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
		outs <- r.Get(Arrive(t.Context()), client.ObjectKey{Namespace: "ns", Name: "cm"}, withKind)
	}()
	waitFor(t, "two GETs in flight", func() bool { return api.inFlight.Load() == 2 })
	close(api.gate)
	for range 2 {
		if err := <-outs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestManyOverlappingReaders: 200 admissions over 7 objects and 3 slots each
// read what the object holds.
func TestManyOverlappingReaders(t *testing.T) {
	api := newAPIServer("v1")
	close(api.gate)
	r := &Reader{Reader: api, MaxReads: 3}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if g := <-admit(t.Context(), r, fmt.Sprint("cm-", i%7)); g.err != nil || g.cm.Data["v"] != "v1" {
				t.Errorf("Get: %v %v", g.err, g.cm.Data)
			}
		})
	}
	wg.Wait()
}
