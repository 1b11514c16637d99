package flight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These are package live's tests with strings for objects, run by make test
// under the race detector (its race lane builds nothing but this package and
// the standard library).

// server stands for the API server: a read sees the data as it is when the
// read is sent, and answers when the gate opens. "missing" does not exist.
type server struct {
	gate     chan struct{}
	data     atomic.Value // string
	gets     atomic.Int64
	inFlight atomic.Int64
	most     atomic.Int64
}

var errNotFound = errors.New("not found")

func newServer(data string) *server {
	s := &server{gate: make(chan struct{})}
	s.data.Store(data)
	return s
}

// read is the read of key, for Group.Do.
func (s *server) read(key string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		s.gets.Add(1)
		seen := s.data.Load().(string)
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
		}
		select {
		case <-s.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if key == "missing" {
			return "", errNotFound
		}
		return key + "=" + seen, nil
	}
}

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

type got struct {
	value string
	err   error
}

// arrive is a caller arriving now and reading key in the background.
func arrive(ctx context.Context, g *Group[string, string], s *server, key string) chan got {
	return request(Arrive(ctx), g, s, key)
}

// request is a caller that arrived at ctx reading key in the background.
func request(ctx context.Context, g *Group[string, string], s *server, key string) chan got {
	out := make(chan got, 1)
	go func() {
		v, err := g.Do(ctx, key, s.read(key))
		out <- got{v, err}
	}()
	return out
}

// 20 callers that arrive before the read of a key is answered cost one
// read; a failed read fails each.
func TestConcurrentCallersShareOneRead(t *testing.T) {
	for _, key := range []string{"shared", "missing"} {
		t.Run(key, func(t *testing.T) {
			s := newServer("v1")
			g := &Group[string, string]{}
			var arrived []context.Context
			for range 20 {
				arrived = append(arrived, Arrive(t.Context()))
			}
			var outs []chan got
			for _, ctx := range arrived {
				outs = append(outs, request(ctx, g, s, key))
			}
			waitFor(t, "20 callers waiting", func() bool { return g.Waiting(key) == 20 })
			close(s.gate)
			for _, out := range outs {
				r := <-out
				if key == "missing" {
					if !errors.Is(r.err, errNotFound) {
						t.Fatalf("read of a missing key: %v, want not found", r.err)
					}
					continue
				}
				if r.err != nil || r.value != "shared=v1" {
					t.Fatalf("Do: %q %v, want shared=v1", r.value, r.err)
				}
			}
			if n := s.gets.Load(); n != 1 {
				t.Errorf("20 callers sent %d reads, want 1", n)
			}
		})
	}
}

// A read sent before a caller arrived may miss a write that caller must see:
// it sends a read of its own; a read not yet sent is shared.
func TestReadSentBeforeArrivalIsNotShared(t *testing.T) {
	t.Run("sent before", func(t *testing.T) {
		s := newServer("v1")
		g := &Group[string, string]{}
		early := arrive(t.Context(), g, s, "cm")
		waitFor(t, "the first read sent", func() bool { return s.gets.Load() == 1 })
		s.data.Store("v2")
		late := arrive(t.Context(), g, s, "cm")
		waitFor(t, "a second read", func() bool { return s.gets.Load() == 2 })
		close(s.gate)
		if r := <-early; r.err != nil || r.value != "cm=v1" {
			t.Fatalf("early caller read %q %v, want cm=v1", r.value, r.err)
		}
		if r := <-late; r.err != nil || r.value != "cm=v2" {
			t.Fatalf("late caller read %q %v, want cm=v2: it shared a read sent before it arrived", r.value, r.err)
		}
	})
	t.Run("not sent yet", func(t *testing.T) {
		s := newServer("v1")
		g := &Group[string, string]{MaxReads: 1}
		busy := arrive(t.Context(), g, s, "other") // takes the only slot
		waitFor(t, "the slot taken", func() bool { return s.gets.Load() == 1 })
		early := arrive(t.Context(), g, s, "cm")
		waitFor(t, "the early caller waiting", func() bool { return g.Waiting("cm") == 1 })
		s.data.Store("v2")
		late := arrive(t.Context(), g, s, "cm")
		waitFor(t, "both callers waiting", func() bool { return g.Waiting("cm") == 2 })
		close(s.gate)
		<-busy
		for _, out := range []chan got{early, late} {
			if r := <-out; r.err != nil || r.value != "cm=v2" {
				t.Fatalf("read %q %v, want cm=v2 (the shared read was sent after both arrived)", r.value, r.err)
			}
		}
		if n := s.gets.Load(); n != 2 {
			t.Errorf("%d reads, want 2 (other, then cm once)", n)
		}
	})
}

// Callers of 40 keys have at most MaxReads reads in flight together, and
// each key is read.
func TestReadsAreBounded(t *testing.T) {
	for _, bound := range []int{0, 5} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			s := newServer("v1")
			g := &Group[string, string]{MaxReads: bound}
			want := int64(min(40, bound))
			if bound == 0 {
				want = DefaultReads
			}
			var outs []chan got
			for i := range 40 {
				outs = append(outs, arrive(t.Context(), g, s, fmt.Sprint("cm-", i)))
			}
			waitFor(t, fmt.Sprint(want, " reads in flight"), func() bool { return s.inFlight.Load() == want })
			close(s.gate)
			for _, out := range outs {
				if r := <-out; r.err != nil {
					t.Fatal(r.err)
				}
			}
			if most := s.most.Load(); most != want {
				t.Errorf("%d reads in flight at most, want %d", most, want)
			}
			if n := s.gets.Load(); n != 40 {
				t.Errorf("%d reads, want 40", n)
			}
		})
	}
}

// A caller whose context ends while it waits gets an error, and a read
// nobody waits for any more is never sent.
func TestCallerGivesUp(t *testing.T) {
	s := newServer("v1")
	g := &Group[string, string]{MaxReads: 1}
	busy := arrive(t.Context(), g, s, "other")
	waitFor(t, "the slot taken", func() bool { return s.gets.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	out := arrive(ctx, g, s, "cm")
	waitFor(t, "the caller waiting", func() bool { return g.Waiting("cm") == 1 })
	cancel()
	if r := <-out; r.err == nil {
		t.Fatalf("a cancelled caller read %q", r.value)
	}
	close(s.gate)
	<-busy
	waitFor(t, "no read left", func() bool { return g.InFlight() == 0 })
	if n := s.gets.Load(); n != 1 {
		t.Errorf("%d reads, want 1: the read of cm was sent for nobody", n)
	}
}

// When every caller waiting for a read has given up, the read is cancelled
// (its slot freed) and a later caller sends a read of its own.
func TestAbandonedReadIsCancelled(t *testing.T) {
	s := newServer("v1")
	g := &Group[string, string]{MaxReads: 1, Timeout: time.Hour} // no timeout ends it
	ctx, cancel := context.WithCancel(t.Context())
	out := arrive(ctx, g, s, "cm")
	waitFor(t, "the read sent", func() bool { return s.inFlight.Load() == 1 })
	cancel()
	if r := <-out; r.err == nil {
		t.Fatalf("a cancelled caller read %q", r.value)
	}
	waitFor(t, "the abandoned read cancelled", func() bool { return s.inFlight.Load() == 0 })
	later := arrive(t.Context(), g, s, "cm")
	waitFor(t, "a second read sent", func() bool { return s.gets.Load() == 2 })
	close(s.gate)
	if r := <-later; r.err != nil || r.value != "cm=v1" {
		t.Fatalf("later caller read %q %v", r.value, r.err)
	}
}

// A read that waited for a slot longer than the timeout still gets the
// whole timeout once it is sent; a read of the caller's own (Own) holds a
// slot and is not bounded by it.
func TestTimeoutRunsFromTheSend(t *testing.T) {
	s := newServer("v1")
	g := &Group[string, string]{MaxReads: 1, Timeout: 50 * time.Millisecond}
	busy := make(chan error, 1)
	go func() {
		busy <- g.Own(t.Context(), "other", func(ctx context.Context) error {
			_, err := s.read("other")(ctx)
			return err
		})
	}()
	waitFor(t, "the slot taken", func() bool { return s.inFlight.Load() == 1 })
	out := arrive(t.Context(), g, s, "cm")
	waitFor(t, "the caller waiting", func() bool { return g.Waiting("cm") == 1 })
	time.Sleep(4 * g.Timeout) // what is tested: time spent waiting for the slot
	close(s.gate)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if r := <-out; r.err != nil {
		t.Fatalf("a read that waited for its slot failed: %v", r.err)
	}
}

// 200 callers over 7 keys and 3 slots each read what the key holds.
func TestManyOverlappingCallers(t *testing.T) {
	s := newServer("v1")
	close(s.gate)
	g := &Group[string, string]{MaxReads: 3}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			key := fmt.Sprint("cm-", i%7)
			if r := <-arrive(t.Context(), g, s, key); r.err != nil || r.value != key+"=v1" {
				t.Errorf("Do: %q %v", r.value, r.err)
			}
		})
	}
	wg.Wait()
}
