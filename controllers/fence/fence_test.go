package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// lock is a resource lock whose writes fail while fail is set; the lease's
// holder is holder, and updates counts the Updates that reached it.
type lock struct {
	resourcelock.Interface
	fail    error
	holder  string
	updates int
}

func (l *lock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.fail }
func (l *lock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	l.updates++
	return l.fail
}
func (l *lock) Identity() string { return "me" }
func (l *lock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: l.holder}, nil, nil
}

// TestReleasesOnlyItsOwnLease: client-go releases the lease after reading it,
// whoever that read shows as the holder. The release reaches the API server
// only over this replica's own lease; over another's it is refused, and this
// replica writes no more either way.
func TestReleasesOnlyItsOwnLease(t *testing.T) {
	for _, holder := range []string{"me", "the-next-leader"} {
		inner := &lock{holder: holder}
		lease := Wrap(inner, time.Minute)
		if err := lease.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := lease.Get(t.Context()); err != nil {
			t.Fatal(err)
		}
		err := lease.Update(t.Context(), resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1})
		switch mine := holder == "me"; {
		case mine && (err != nil || inner.updates != 1):
			t.Errorf("held by me: release returned %v with %d updates sent, want it sent", err, inner.updates)
		case !mine && (!errors.Is(err, ErrNotHolder) || inner.updates != 0):
			t.Errorf("held by %s: release returned %v with %d updates sent, want it refused, nothing sent", holder, err, inner.updates)
		}
		if !lease.Until().IsZero() {
			t.Errorf("held by %s: after the release this replica may still write until %v", holder, lease.Until())
		}
	}
}

func TestWritesOnlyWithinTheRenewDeadline(t *testing.T) {
	const hold = 3 * time.Second
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	now := t0
	inner := &lock{}
	lease := Wrap(inner, hold)
	lease.now = func() time.Time { return now }

	var deadlines []time.Time
	c := Client(fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			d, _ := ctx.Deadline()
			deadlines = append(deadlines, d)
			return c.Patch(ctx, obj, p, opts...)
		},
	}).WithObjects(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}}).Build(), lease)
	patch := func() error {
		return c.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}},
			client.RawPatch("application/merge-patch+json", []byte(`{"data":{"k":"v"}}`)))
	}
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}

	steps := []struct {
		name    string
		before  func()
		refused bool
	}{
		{"never elected", func() {}, true},
		{"just took the lease", func() { _ = lease.Create(t.Context(), mine) }, false},
		{"just inside the renew deadline", func() { now = t0.Add(hold - time.Millisecond) }, false},
		{"renew deadline passed, no renewal", func() { now = t0.Add(hold) }, true},
		{"a renewal that failed does not help", func() { inner.fail = errors.New("timeout"); _ = lease.Update(t.Context(), mine) }, true},
		{"a renewal that succeeded does", func() { inner.fail = nil; _ = lease.Update(t.Context(), mine) }, false},
		{"released the lease", func() { _ = lease.Update(t.Context(), resourcelock.LeaderElectionRecord{}) }, true},
	}
	for _, s := range steps {
		s.before()
		n := len(deadlines)
		err := patch()
		switch {
		case s.refused && !errors.Is(err, ErrLeaseLapsed):
			t.Errorf("%s: write returned %v, want it refused", s.name, err)
		case s.refused && len(deadlines) != n:
			t.Errorf("%s: the refused write reached the API client", s.name)
		case !s.refused && err != nil:
			t.Errorf("%s: write returned %v, want it done", s.name, err)
		}
	}
	// Each write that went out carried the end of the lease as its deadline.
	want := []time.Time{t0.Add(hold), t0.Add(hold), t0.Add(2 * hold)}
	if len(deadlines) != len(want) {
		t.Fatalf("%d writes went out, want %d", len(deadlines), len(want))
	}
	for i := range want {
		if !deadlines[i].Equal(want[i]) {
			t.Errorf("write %d: deadline %v, want %v", i, deadlines[i], want[i])
		}
	}
}
