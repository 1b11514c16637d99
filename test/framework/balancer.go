package framework

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Balancer is a loopback TCP load balancer in front of several configstamp
// replicas' webhook ports, as a Service is in front of their pods: each new
// connection goes to the next backend that accepts it, so a dead replica is
// skipped and the webhook stays up while one replica runs. TLS passes through.
//
// With one backend it is also the proxy between one replica and the API
// server (NewProxy), which a fault can Cut: a network partition of that
// replica's node.
type Balancer struct {
	ln       net.Listener
	dialer   net.Dialer
	mu       sync.Mutex
	backends []string
	next     int
	// conns are the proxied connections, each true once it lost bytes to a Cut.
	conns  map[net.Conn]bool
	closed bool
	cut    bool
}

// NewBalancer listens on a free loopback port.
func NewBalancer() (*Balancer, error) {
	return newBalancer(nil)
}

// NewProxy listens on a free loopback port and forwards every connection to
// backend from the loopback address from (127.0.0.11, say): the API server's
// audit log then names from as the source of the requests that passed here.
func NewProxy(backend string, from net.IP) (*Balancer, error) {
	b, err := newBalancer(&net.TCPAddr{IP: from})
	if err != nil {
		return nil, err
	}
	b.SetBackends(backend)
	return b, nil
}

func newBalancer(local net.Addr) (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{ln: ln, conns: map[net.Conn]bool{}, dialer: net.Dialer{Timeout: time.Second, LocalAddr: local}}
	go b.serve()
	return b, nil
}

// Cut blackholes the proxy: from now on every byte either way is dropped, on
// the connections open now and on new ones, as packets are in a network
// partition. Nothing sent while cut is ever delivered.
func (b *Balancer) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = true
	for c := range b.conns {
		b.conns[c] = true
	}
}

// Heal ends the partition: the connections that lost bytes are closed (their
// streams are broken, as TCP would find after a partition), new ones pass.
func (b *Balancer) Heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = false
	for c, lost := range b.conns {
		if lost {
			_ = c.Close()
			delete(b.conns, c)
		}
	}
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
		if c, err = b.dialer.Dial("tcp", addr); err == nil {
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
		b.conns[c] = b.cut
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
		b.copy(dst, src)
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

// copy forwards src to dst until either ends, dropping what arrives while the
// proxy is cut.
func (b *Balancer) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.dropping(src, dst) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// dropping reports whether the proxy is cut, marking the pair as having lost bytes.
func (b *Balancer) dropping(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.cut {
		return false
	}
	for _, c := range cs {
		if _, ok := b.conns[c]; ok {
			b.conns[c] = true
		}
	}
	return true
}
