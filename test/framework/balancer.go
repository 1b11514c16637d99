package framework

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Balancer is a loopback TCP load balancer in front of several configstamp
// replicas' webhook ports, as a Service is in front of their pods: each new
// connection goes to the next backend that accepts it, so a dead replica is
// skipped and the webhook stays up while one replica runs. TLS passes through.
type Balancer struct {
	ln       net.Listener
	mu       sync.Mutex
	backends []string
	next     int
	conns    map[net.Conn]struct{}
	closed   bool
}

// NewBalancer listens on a free loopback port.
func NewBalancer() (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{ln: ln, conns: map[net.Conn]struct{}{}}
	go b.serve()
	return b, nil
}

// Addr is the balancer's host:port.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// SetBackends replaces the backends (host:port each).
func (b *Balancer) SetBackends(addrs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append([]string(nil), addrs...)
}

// Close stops accepting and ends every proxied connection.
func (b *Balancer) Close() {
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.ln.Close()
}

func (b *Balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go b.proxy(c)
	}
}

// dial connects to the next backend that answers, trying each once.
func (b *Balancer) dial() (net.Conn, error) {
	b.mu.Lock()
	backends, start := b.backends, b.next
	b.next++
	b.mu.Unlock()
	err := errors.New("no backend")
	for i := range backends {
		addr := backends[(start+i)%len(backends)]
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (b *Balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *Balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		delete(b.conns, c)
		_ = c.Close()
	}
}

func (b *Balancer) proxy(client net.Conn) {
	backend, err := b.dial()
	if err != nil {
		_ = client.Close() // the API server sees the webhook down: failurePolicy decides
		return
	}
	if !b.track(client, backend) {
		_ = client.Close()
		_ = backend.Close()
		return
	}
	defer b.untrack(client, backend)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}
