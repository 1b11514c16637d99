package webhook

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestDrainClosesEachConnection: before Begin a client's calls share one
// kept-alive connection; after it, each answer closes its connection, so the
// client's next call opens a new one (through the Service, in a cluster)
// instead of reusing one the replica is about to close.
func TestDrainClosesEachConnection(t *testing.T) {
	d := &Drain{}
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(d.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "{}")
	})))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	// The client reads Connection: close into Response.Close.
	call := func() bool {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.Close
	}
	for range 3 {
		if call() {
			t.Fatal("before the drain: Connection: close, want the connection kept alive")
		}
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("before the drain: %d connections for 3 calls, want 1", n)
	}
	d.Begin()
	for range 3 {
		if !call() {
			t.Fatal("draining: the connection kept alive, want Connection: close")
		}
	}
	if n := opened.Load(); n != 3 {
		t.Fatalf("draining: %d connections in all, want 3 (the kept-alive one closed after the first answer, then one per call)", n)
	}
}
