package controllers

import (
	"testing"
	"time"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// A wake never blocks its caller: past the channel's buffer the rest follows
// from a goroutine, every key once and in order. A nil Wakes wakes nothing.
func TestWakeNeverBlocks(t *testing.T) {
	var none Wakes
	none.Wake(rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "a"})

	w := make(Wakes, 2)
	keys := []rollout.Key{{Kind: "Deployment", Namespace: "ns", Name: "a"}, {Kind: "StatefulSet", Namespace: "ns", Name: "b"},
		{Kind: "DaemonSet", Namespace: "ns", Name: "c"}, {Kind: "Rollout", Namespace: "ns", Name: "d"}}
	done := make(chan struct{})
	go func() { w.Wake(keys...); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wake blocked past the buffer")
	}
	for i, want := range keys {
		select {
		case e := <-w:
			if e.Object != want {
				t.Fatalf("wake %d: %v, want %v", i, e.Object, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("wake %d (%v) never came", i, want)
		}
	}
}
