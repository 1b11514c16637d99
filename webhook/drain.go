package webhook

import (
	"net/http"
	"sync/atomic"

	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Drain makes a webhook server's answers close their connections once Begin
// is called. A replica told to stop (SIGTERM) keeps serving for a while
// (--shutdown-delay) and then closes what is left. An API server keeps its
// connections to the replica alive past the endpoint's removal; a call it
// sends on one just as the replica closes it fails, is not retried (a POST),
// and failurePolicy Ignore admits it unstamped. Answered with
// `Connection: close` (over HTTP/2: a GOAWAY), the API server drops each
// connection after its answer and opens the next one through the Service, to
// a replica that stays; only connections idle for the whole delay are left to
// close.
type Drain struct{ on atomic.Bool }

// Begin makes every answer from now on close its connection.
func (d *Drain) Begin() { d.on.Store(true) }

// Server returns s with every handler registered on it behind the drain.
func (d *Drain) Server(s ctrlwebhook.Server) ctrlwebhook.Server { return drainingServer{s, d} }

type drainingServer struct {
	ctrlwebhook.Server
	d *Drain
}

// Register registers h at path, behind the drain.
func (s drainingServer) Register(path string, h http.Handler) {
	s.Server.Register(path, s.d.Handler(h))
}

// Handler returns h behind the drain.
func (d *Drain) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.on.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
