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

// waiting is how many callers wait for the read of name.
func (r *Reader) waiting(name string) int {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, f := range r.flights {
		if k.key.Name == name {
			return f.waiters
		}
	}
	return 0
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

// TestReadSentBeforeArrivalIsNotShared is the consistency rule: a read sent
// before an admission arrived may miss a write that admission must see (its
// ConfigMap applied a moment before its Deployment). That admission sends a
// read of its own; a read not yet sent is shared, as it will see the write.
func TestReadSentBeforeArrivalIsNotShared(t *testing.T) {
	t.Run("sent before", func(t *testing.T) {
		api := newAPIServer("v1")
		r := &Reader{Reader: api}
		early := admit(t.Context(), r, "cm")
		waitFor(t, "the first GET sent", func() bool { return api.gets.Load() == 1 })
		api.data.Store("v2") // the user's apply completes, then the Deployment arrives
		late := admit(t.Context(), r, "cm")
		waitFor(t, "a second GET (the late admission may not share a read sent before it arrived)", func() bool { return api.gets.Load() == 2 })
		close(api.gate)
		if g := <-early; g.err != nil || g.cm.Data["v"] != "v1" {
			t.Fatalf("early admission read %v %v, want v1", g.err, g.cm.Data)
		}
		if g := <-late; g.err != nil || g.cm.Data["v"] != "v2" {
			t.Fatalf("late admission read %v %v, want v2: it shared a read sent before it arrived", g.err, g.cm.Data)
		}
	})
	t.Run("not sent yet", func(t *testing.T) {
		api := newAPIServer("v1")
		r := &Reader{Reader: api, MaxReads: 1}
		busy := admit(t.Context(), r, "other") // takes the only slot
		waitFor(t, "the slot taken", func() bool { return api.gets.Load() == 1 })
		early := admit(t.Context(), r, "cm")
		waitFor(t, "the early admission waiting", func() bool { return r.waiting("cm") == 1 })
		api.data.Store("v2")
		late := admit(t.Context(), r, "cm")
		waitFor(t, "both admissions waiting", func() bool { return r.waiting("cm") == 2 })
		close(api.gate)
		<-busy
		for _, out := range []chan got{early, late} {
			if g := <-out; g.err != nil || g.cm.Data["v"] != "v2" {
				t.Fatalf("read %v %v, want v2 (the shared read was sent after both arrived)", g.err, g.cm.Data)
			}
		}
		if n := api.gets.Load(); n != 2 {
			t.Errorf("%d GETs, want 2 (other, then cm once)", n)
		}
	})
}

// TestReadsAreBounded: admissions reading 40 different objects have at most
// MaxReads GETs in flight together, and each object is read.
func TestReadsAreBounded(t *testing.T) {
	for _, bound := range []int{0, 5} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			api := newAPIServer("v1")
			r := &Reader{Reader: api, MaxReads: bound}
			want := int64(min(40, bound))
			if bound == 0 {
				want = DefaultReads
			}
			var outs []chan got
			for i := range 40 {
				outs = append(outs, admit(t.Context(), r, fmt.Sprint("cm-", i)))
			}
			waitFor(t, fmt.Sprint(want, " GETs in flight"), func() bool { return api.inFlight.Load() == want })
			close(api.gate)
			for _, out := range outs {
				if g := <-out; g.err != nil {
					t.Fatal(g.err)
				}
			}
			if most := api.most.Load(); most != want {
				t.Errorf("%d GETs in flight at most, want %d", most, want)
			}
			if n := api.gets.Load(); n != 40 {
				t.Errorf("%d GETs, want 40", n)
			}
		})
	}
}

// TestCallerGivesUp: an admission whose context ends while it waits gets an
// error, and a read nobody waits for any more is never sent.
func TestCallerGivesUp(t *testing.T) {
	api := newAPIServer("v1")
	r := &Reader{Reader: api, MaxReads: 1}
	busy := admit(t.Context(), r, "other")
	waitFor(t, "the slot taken", func() bool { return api.gets.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	out := admit(ctx, r, "cm")
	waitFor(t, "the admission waiting", func() bool { return r.waiting("cm") == 1 })
	cancel()
	if g := <-out; g.err == nil {
		t.Fatalf("a cancelled admission read %v", g.cm.Data)
	}
	close(api.gate)
	<-busy
	waitFor(t, "no read left", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.flights) == 0
	})
	if n := api.gets.Load(); n != 1 {
		t.Errorf("%d GETs, want 1: the read of cm was sent for nobody", n)
	}
}

// TestAbandonedReadIsCancelled: when every admission waiting for a read has
// given up, the GET is cancelled (its slot freed for reads someone waits for),
// and a later admission sends a read of its own.
func TestAbandonedReadIsCancelled(t *testing.T) {
	api := newAPIServer("v1")
	r := &Reader{Reader: api, MaxReads: 1, Timeout: time.Hour} // no timeout ends it
	ctx, cancel := context.WithCancel(t.Context())
	out := admit(ctx, r, "cm")
	waitFor(t, "the GET sent", func() bool { return api.inFlight.Load() == 1 })
	cancel()
	if g := <-out; g.err == nil {
		t.Fatalf("a cancelled admission read %v", g.cm.Data)
	}
	waitFor(t, "the abandoned GET cancelled", func() bool { return api.inFlight.Load() == 0 })
	later := admit(t.Context(), r, "cm")
	waitFor(t, "a second GET sent", func() bool { return api.gets.Load() == 2 })
	close(api.gate)
	if g := <-later; g.err != nil || g.cm.Data["v"] != "v1" {
		t.Fatalf("later admission read %v %v", g.err, g.cm.Data)
	}
}

// TestTimeoutRunsFromTheSend: a read that waited for a slot longer than the
// timeout still gets the whole timeout once it is sent.
func TestTimeoutRunsFromTheSend(t *testing.T) {
	api := newAPIServer("v1")
	r := &Reader{Reader: api, MaxReads: 1, Timeout: 50 * time.Millisecond}
	busy := make(chan error, 1)
	go func() { // a read of its own (with options): the timeout does not bound it
		busy <- r.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "other"}, &corev1.ConfigMap{}, &client.GetOptions{})
	}()
	waitFor(t, "the slot taken", func() bool { return api.inFlight.Load() == 1 })
	out := admit(t.Context(), r, "cm")
	waitFor(t, "the admission waiting", func() bool { return r.waiting("cm") == 1 })
	time.Sleep(4 * r.Timeout) // what is tested: time spent waiting for the slot
	close(api.gate)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if g := <-out; g.err != nil {
		t.Fatalf("a read that waited for its slot failed: %v", g.err)
	}
}

// TestManyOverlappingReaders: 200 admissions over 7 objects and 3 slots each
// read what the object holds (make test also runs this package with -race).
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
