package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// gatedReader answers every Get with NotFound once the gate opens, and counts
// the Gets in flight and the most ever in flight.
type gatedReader struct {
	gate     chan struct{}
	inFlight atomic.Int64
	most     atomic.Int64
	gets     atomic.Int64
}

func (g *gatedReader) Get(ctx context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	g.gets.Add(1)
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
}

func (g *gatedReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// waitFor polls cond until it holds or a minute has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func extraNames(prefix string, n int) map[string]string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return map[string]string{stamp.AnnotationExtraConfigMaps: strings.Join(names, ",")}
}

// TestComputeBoundsReads: one computation reads at most MaxReadsPerCompute
// objects at once, and an annotation with 2,000 names costs
// stamp.MaxExtraNames reads. (The bound on all admissions together is
// webhook/live's.)
func TestComputeBoundsReads(t *testing.T) {
	tests := map[string]struct {
		computations, names int
		perCompute          int
		wantMost            int64
	}{
		"one admission, defaults":  {computations: 1, names: 2000, wantMost: DefaultReadsPerCompute},
		"one admission, 3 at once": {computations: 1, names: 40, perCompute: 3, wantMost: 3},
		"2 admissions, 3 each":     {computations: 2, names: 40, perCompute: 3, wantMost: 6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := &gatedReader{gate: make(chan struct{})}
			r := &Resolver{Sources: g, Index: g, Keys: stamp.NewKeyring([]byte("k")), Parallel: true,
				MaxReadsPerCompute: tc.perCompute}
			var wg sync.WaitGroup
			comps := make([]*Computation, tc.computations)
			errs := make([]error, tc.computations)
			for i := range tc.computations {
				wg.Go(func() {
					comps[i], errs[i] = r.Compute(t.Context(), "ns", extraNames(fmt.Sprint(i), tc.names), &corev1.PodTemplateSpec{})
				})
			}
			// Every reader that may run is blocked at the gate: the bound is reached ...
			waitFor(t, fmt.Sprintf("%d reads in flight", tc.wantMost), func() bool { return g.inFlight.Load() >= tc.wantMost })
			close(g.gate)
			wg.Wait()
			// ... and never exceeded.
			if most := g.most.Load(); most != tc.wantMost {
				t.Errorf("at most %d reads in flight, want %d", most, tc.wantMost)
			}
			want := int64(tc.computations * min(tc.names, stamp.MaxExtraNames))
			if gets := g.gets.Load(); gets != want {
				t.Errorf("%d reads, want %d", gets, want)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("Compute: %v", err)
				}
				if len(comps[i].Versions) != min(tc.names, stamp.MaxExtraNames) {
					t.Fatalf("%d sources read, want %d", len(comps[i].Versions), min(tc.names, stamp.MaxExtraNames))
				}
				if tc.names > stamp.MaxExtraNames && len(comps[i].Problems) != 1 {
					t.Fatalf("problems %v, want one about the names beyond the cap", comps[i].Problems)
				}
			}
		})
	}
}

// TestComputeCancelled: a computation whose context ends while it waits for a
// read returns an error instead of reading further.
func TestComputeCancelled(t *testing.T) {
	g := &gatedReader{gate: make(chan struct{})}
	r := &Resolver{Sources: g, Index: g, Keys: stamp.NewKeyring([]byte("k")), Parallel: true, MaxReadsPerCompute: 1}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.Compute(ctx, "ns", extraNames("a", 10), &corev1.PodTemplateSpec{})
		done <- err
	}()
	waitFor(t, "one read in flight", func() bool { return g.inFlight.Load() == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("a cancelled computation succeeded")
	}
	if gets := g.gets.Load(); gets != 1 {
		t.Errorf("%d reads after cancellation, want 1", gets)
	}
	close(g.gate)
}
