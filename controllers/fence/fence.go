// Package fence keeps a leader that lost its lease from writing.
//
// client-go's leader election gives the lease up after failing to renew it
// for the renew deadline, and controller-runtime then stops the controllers;
// but between the two lie the release of the lease (one more API call, up to
// its client timeout, when ReleaseOnCancel is set) and the stop itself, and a
// follower may take the lease in that time (lease duration after the last
// renewal it saw). A leader cut off from the API server whose traffic comes
// back in that window would write next to the new leader. So configstamp's
// own clock decides: its leader-elected writers write only within the renew
// deadline of the start of the last renewal that succeeded, and each write
// carries that moment as its deadline.
package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrLeaseLapsed is what a fenced write returns once the lease may be another replica's.
var ErrLeaseLapsed = errors.New("not writing: this replica has not renewed its leader lease in time, another may hold it")

// ErrNotHolder is what a release returns when the lease is another replica's.
var ErrNotHolder = errors.New("not releasing the leader lease: this replica no longer holds it")

// Lease is a resource lock that remembers until when its holder may write:
// hold after the start of the last Create or Update that made it the holder.
type Lease struct {
	resourcelock.Interface
	hold time.Duration
	now  func() time.Time

	mu     sync.Mutex
	until  time.Time
	holder string // as the last Get read it
}

// Wrap remembers the renewals made through lock. hold is the leader election's
// renew deadline, shorter than the lease duration a follower waits.
func Wrap(lock resourcelock.Interface, hold time.Duration) *Lease {
	return &Lease{Interface: lock, hold: hold, now: time.Now}
}

// New builds the Lease lock namespace/name as controller-runtime would (an
// identity of the host name and a UUID, a client timeout of half the renew
// deadline so one hung request does not cost the lease) and wraps it.
func New(cfg *rest.Config, namespace, name string, renewDeadline time.Duration) (*Lease, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	cfg.Timeout = max(renewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coordination,
		resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, err
	}
	return Wrap(lock, renewDeadline), nil
}

// Create takes the lease.
func (l *Lease) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	began := l.now()
	err := l.Interface.Create(ctx, rec)
	l.record(began, rec, err)
	return err
}

// Get reads the lease and remembers its holder.
func (l *Lease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.holder = rec.HolderIdentity
		l.mu.Unlock()
	}
	return rec, raw, err
}

// Update renews, takes or releases the lease. A release (no holder) is
// written over this replica's own lease only. client-go's release reads the
// lease first, for its resourceVersion, but judges by the holder it saw
// before: a replica cut off from the API server past its renew deadline, its
// traffic back, emptied the lease the next leader had taken meanwhile (CI,
// test/chaos), and any replica could have taken it at once while that leader
// still wrote.
func (l *Lease) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	began := l.now()
	var err error
	if holder := l.lastHolder(); rec.HolderIdentity == "" && holder != l.Identity() {
		err = fmt.Errorf("%w (holder %q)", ErrNotHolder, holder)
	} else {
		err = l.Interface.Update(ctx, rec)
	}
	l.record(began, rec, err)
	return err
}

func (l *Lease) lastHolder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder
}

func (l *Lease) record(began time.Time, rec resourcelock.LeaderElectionRecord, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case rec.HolderIdentity != l.Identity(): // released, or not: it writes no more
		l.until = time.Time{}
	case err == nil:
		l.until = began.Add(l.hold)
	}
}

// Until is the moment this replica stops writing unless it renews before.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// context bounds ctx by Until, or says the lease has lapsed.
func (l *Lease) context(ctx context.Context) (context.Context, context.CancelFunc, error) {
	until := l.Until()
	if !l.now().Before(until) {
		return nil, nil, fmt.Errorf("%w (renew deadline %v)", ErrLeaseLapsed, l.hold)
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	return ctx, cancel, nil
}

// Client is c whose writes happen only while the lease is this replica's.
func Client(c client.Client, l *Lease) client.Client {
	return &fenced{Client: c, lease: l}
}

type fenced struct {
	client.Client
	lease *Lease
}

// write runs do within the lease, or not at all.
func (f *fenced) write(ctx context.Context, do func(context.Context) error) error {
	ctx, cancel, err := f.lease.context(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return do(ctx)
}

func (f *fenced) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.Create(ctx, obj, opts...) })
}

func (f *fenced) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.Update(ctx, obj, opts...) })
}

func (f *fenced) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.Patch(ctx, obj, patch, opts...) })
}

func (f *fenced) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.Delete(ctx, obj, opts...) })
}

func (f *fenced) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (f *fenced) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return f.write(ctx, func(ctx context.Context) error { return f.Client.Apply(ctx, obj, opts...) })
}

// Status is the status sub-resource, fenced like the rest.
func (f *fenced) Status() client.SubResourceWriter { return f.SubResource("status") }

func (f *fenced) SubResource(name string) client.SubResourceClient {
	return &fencedSubClient{SubResourceClient: f.Client.SubResource(name), f: f}
}

type fencedSubClient struct {
	client.SubResourceClient
	f *fenced
}

func (s *fencedSubClient) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.f.write(ctx, func(ctx context.Context) error { return s.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (s *fencedSubClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.f.write(ctx, func(ctx context.Context) error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *fencedSubClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.f.write(ctx, func(ctx context.Context) error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

func (s *fencedSubClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.f.write(ctx, func(ctx context.Context) error { return s.SubResourceClient.Apply(ctx, obj, opts...) })
}
