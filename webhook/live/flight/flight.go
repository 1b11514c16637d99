// Package flight is the core of the webhook's live reads (package live): it
// shares one read of a key between callers when sharing cannot make one of
// them see older data, and bounds the reads in flight. It knows nothing of
// Kubernetes: a key is any comparable value and a read any function, so its
// tests run under the race detector in make test without compiling
// client-go for it.
//
// A read sent after a caller arrived is as good for that caller as a read
// of its own: the API server's GET without a resourceVersion sees every
// write that completed before it was sent. Arrive marks when a caller
// arrived; Group.Do joins a read of the same key that is not yet sent, or
// was sent after the caller arrived, and otherwise sends a new one.
package flight

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults: DefaultReads bounds the reads in flight of all callers together;
// DefaultTimeout bounds one shared read from the moment it is sent.
const (
	DefaultReads   = 32
	DefaultTimeout = 10 * time.Second
)

// clock orders arrivals and reads: a read whose tick is above an arrival's
// was sent after that caller arrived.
var clock atomic.Uint64

type arrivalKey struct{}

// Arrive returns ctx marked with the moment it is called: a read shared by
// Group.Do on this context was sent after it.
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

// Group shares and bounds the reads of values V by key K. Its zero value is
// ready to use.
type Group[K comparable, V any] struct {
	// MaxReads bounds the reads in flight, shared or not; 0 is
	// DefaultReads. Read once, at the first call.
	MaxReads int
	// Timeout bounds one shared read from the moment it is sent, whoever
	// waits for it; 0 is DefaultTimeout.
	Timeout time.Duration

	once    sync.Once
	slots   chan struct{}
	mu      sync.Mutex
	flights map[K]*call[V]
}

// call is one shared read and the callers waiting for it.
type call[V any] struct {
	done chan struct{}
	// cancel ends the read (nobody waits any more) or releases its context.
	cancel context.CancelFunc
	// sent is the clock's tick when the read was sent, 0 until then; waiters
	// is how many callers still wait. Both under Group.mu.
	sent    uint64
	waiters int
	// value and err are the outcome, set before done is closed.
	value V
	err   error
}

func (g *Group[K, V]) init() {
	g.once.Do(func() {
		g.slots = make(chan struct{}, cmp.Or(g.MaxReads, DefaultReads))
		g.flights = map[K]*call[V]{}
	})
}

// Do returns what read returns for key: through a read of key sent after
// ctx's Arrive (or not sent yet), else a new one, read. Every caller of one
// read gets the same value. read gets a context of the read's own, which
// ends at the timeout or when every caller has given up.
func (g *Group[K, V]) Do(ctx context.Context, key K, read func(context.Context) (V, error)) (V, error) {
	g.init()
	c := g.join(ctx, key, arrival(ctx), read)
	select {
	case <-c.done:
		return c.value, c.err
	case <-ctx.Done():
		g.leave(key, c)
		var zero V
		return zero, fmt.Errorf("while waiting to read %v: %w", key, ctx.Err())
	}
}

// Own runs read, a read of the caller's own, within the bound.
func (g *Group[K, V]) Own(ctx context.Context, key K, read func(context.Context) error) error {
	g.init()
	if err := g.acquire(ctx, key); err != nil {
		return err
	}
	defer g.release()
	return read(ctx)
}

// Waiting is how many callers wait for the shared read of key now.
func (g *Group[K, V]) Waiting(key K) int {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.flights[key]; c != nil {
		return c.waiters
	}
	return 0
}

// InFlight is how many keys have a shared read, sent or waiting for a slot.
func (g *Group[K, V]) InFlight() int {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.flights)
}

// join returns the read of key that a caller who arrived at tick may share,
// starting one when there is none.
func (g *Group[K, V]) join(ctx context.Context, key K, tick uint64, read func(context.Context) (V, error)) *call[V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.flights[key]
	if c == nil || c.sent != 0 && c.sent < tick {
		callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call[V]{done: make(chan struct{}), cancel: cancel}
		g.flights[key] = c
		go g.fly(callCtx, key, c, read)
	}
	c.waiters++
	return c
}

// leave is a caller giving up on c. When it was the last, the read is
// cancelled, sent or not, and nobody can join it any more.
func (g *Group[K, V]) leave(key K, c *call[V]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.waiters--; c.waiters == 0 {
		if g.flights[key] == c {
			delete(g.flights, key)
		}
		c.cancel()
	}
}

// fly sends c's read once a slot is free, unless everyone left (ctx ends).
// The timeout runs from the moment it is sent.
func (g *Group[K, V]) fly(ctx context.Context, key K, c *call[V], read func(context.Context) (V, error)) {
	defer c.cancel()
	defer g.land(key, c)
	if c.err = g.acquire(ctx, key); c.err != nil {
		return
	}
	defer g.release()
	g.mu.Lock()
	if err := ctx.Err(); err != nil { // everyone left: nobody can join it now
		g.mu.Unlock()
		c.err = fmt.Errorf("while waiting to read %v: %w", key, err)
		return
	}
	c.sent = clock.Add(1)
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(g.Timeout, DefaultTimeout))
	defer cancel()
	c.value, c.err = read(ctx)
}

// land ends c: later callers start a read of their own.
func (g *Group[K, V]) land(key K, c *call[V]) {
	g.mu.Lock()
	if g.flights[key] == c {
		delete(g.flights, key)
	}
	g.mu.Unlock()
	close(c.done)
}

// acquire takes one of the slots to read key, unless ctx ends first.
func (g *Group[K, V]) acquire(ctx context.Context, key K) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("while waiting to read %v: %w", key, ctx.Err())
	}
}

// release gives back a slot acquire took.
func (g *Group[K, V]) release() { <-g.slots }
