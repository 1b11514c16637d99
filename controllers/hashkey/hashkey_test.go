package hashkey

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/stamp"
)

var (
	keyA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	keyB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
)

var testSecret = Secret{Namespace: "configstamp-system", Name: "configstamp-hash-key"}

// writes counts the updates made through a fake client: the Secret exists in
// every test that counts, so each write is an update.
type writes struct{ n atomic.Int64 }

func (w *writes) funcs() interceptor.Funcs {
	return interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		w.n.Add(1)
		return c.Update(ctx, obj, opts...)
	}}
}

func keySecret(data map[string][]byte, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testSecret.Namespace, Name: testSecret.Name, Annotations: annotations}, Data: data}
}

func getKeySecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: testSecret.Namespace, Name: testSecret.Name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A restart in the middle of a rotation still knows the previous keys the
// Secret keeps: records and halts sealed with them verify.
func TestLoadReadsPreviousKeys(t *testing.T) {
	prev := stamp.NewHasher(keyB).KeyID()
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{
		DataKey:         keyA,
		PreviousDataKey: formatPreviousKeys([][]byte{keyB, []byte("too short")}),
	}, nil)).Build()
	keys, err := testSecret.Load(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(keys.Key(), keyA) {
		t.Fatalf("key in force %q, want the secret's key", keys.Key())
	}
	h := keys.ByID(prev)
	if h == nil {
		t.Fatalf("the previous key %s kept in the secret is unknown: what it sealed no longer verifies", prev)
	}
	if h.Seal("d", "x") != stamp.NewHasher(keyB).Seal("d", "x") {
		t.Fatal("ByID found a hasher that is not the previous key")
	}
	if ids, _ := keys.Previous(); len(ids) != 1 {
		t.Fatalf("previous keys %q, want only the usable one", ids)
	}
}

// A Secret created by this release says from the start that records are
// sealed: there is nothing of a previous release to take over.
func TestLoadCreatesSealedSecret(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	keys, err := testSecret.Load(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	s := getKeySecret(t, c)
	if s.Annotations[AnnotationRecordsSealed] == "" {
		t.Fatalf("created secret's annotations %v lack %s", s.Annotations, AnnotationRecordsSealed)
	}
	if !bytes.Equal(s.Data[DataKey], keys.Key()) || len(keys.Key()) < minLength {
		t.Fatal("the created secret does not hold the key in force")
	}
}

// After a rotation the watcher writes the key it replaced into the Secret
// (previous-keys), once: the update that follows changes nothing more.
func TestWatcherKeepsPreviousKeys(t *testing.T) {
	w := &writes{}
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{DataKey: keyA}, nil)).
		WithInterceptorFuncs(w.funcs()).Build()
	changes := 0
	kw := &Watcher{Secret: testSecret, Client: c, Keys: stamp.NewKeyring(keyA),
		OnChange: func(context.Context) { changes++ }, Log: logr.Discard()}

	// The informer's first sight of the secret: nothing to keep.
	kw.seen(t.Context(), getKeySecret(t, c))
	if n := w.n.Load(); n != 0 || changes != 0 {
		t.Fatalf("%d writes, %d key changes on the first sight of an unchanged secret; want none", n, changes)
	}

	// An operator rotates the key.
	s := getKeySecret(t, c)
	s.Data[DataKey] = keyB
	if err := c.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	before := w.n.Load()
	kw.seen(t.Context(), getKeySecret(t, c))
	if changes != 1 || !bytes.Equal(kw.Keys.Key(), keyB) {
		t.Fatalf("key changes %d, key in force %q; want the new key put in force once", changes, kw.Keys.Key())
	}
	stored := getKeySecret(t, c)
	if got := previousKeys(stored); len(got) != 1 || !bytes.Equal(got[0], keyA) {
		t.Fatalf("secret keeps previous keys %q (data keys %v); want the replaced key", got, dataKeys(stored))
	}
	if !bytes.Equal(stored.Data[DataKey], keyB) {
		t.Fatal("keeping the previous key changed the key in force")
	}
	if w.n.Load()-before != 1 {
		t.Fatalf("%d writes for one rotation, want 1", w.n.Load()-before)
	}

	// The update event of that write: nothing more to do.
	before = w.n.Load()
	kw.seen(t.Context(), stored)
	if n := w.n.Load() - before; n != 0 || changes != 1 {
		t.Fatalf("%d writes, %d key changes on the watcher's own update; want none (it would loop)", n, changes)
	}
}

func dataKeys(s *corev1.Secret) []string {
	var out []string
	for k := range s.Data {
		out = append(out, k)
	}
	return out
}

// Two replicas, one of them restarted midway (its keyring read from the
// Secret), through ten rotations: the Secret keeps the eight newest previous
// keys, newest first, both replicas know them, and once every replica has
// seen the last rotation nothing is written any more (no ping-pong).
func TestWatchersConverge(t *testing.T) {
	key := func(i int) []byte { return []byte(fmt.Sprintf("rotation-key-number-%02d", i)) }
	w := &writes{}
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{DataKey: key(0)}, nil)).
		WithInterceptorFuncs(w.funcs()).Build()
	watcher := func(keys *stamp.Keyring) *Watcher {
		return &Watcher{Secret: testSecret, Client: c, Keys: keys, Log: logr.Discard()}
	}
	a, b := watcher(stamp.NewKeyring(key(0))), watcher(stamp.NewKeyring(key(0)))
	for i := 1; i <= 10; i++ {
		s := getKeySecret(t, c)
		s.Data[DataKey] = key(i)
		if err := c.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if i == 5 { // b restarts: its keyring is what the Secret holds
			keys, err := testSecret.Load(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			b = watcher(keys)
		}
		for range 2 {
			a.seen(t.Context(), getKeySecret(t, c))
			b.seen(t.Context(), getKeySecret(t, c))
		}
	}
	settled := w.n.Load()
	for range 3 {
		a.seen(t.Context(), getKeySecret(t, c))
		b.seen(t.Context(), getKeySecret(t, c))
	}
	if n := w.n.Load() - settled; n != 0 {
		t.Fatalf("%d more writes once every replica saw the last rotation: the replicas fight over the Secret", n)
	}
	got := previousKeys(getKeySecret(t, c))
	if len(got) != stamp.KeepPrevious {
		t.Fatalf("the Secret keeps %d previous keys, want %d", len(got), stamp.KeepPrevious)
	}
	for i, k := range got {
		if want := key(9 - i); !bytes.Equal(k, want) {
			t.Fatalf("previous key %d is %q, want %q (newest first)", i, k, want)
		}
		for name, r := range map[string]*Watcher{"a": a, "b": b} {
			if r.Keys.ByID(stamp.NewHasher(k).KeyID()) == nil {
				t.Errorf("replica %s does not know the previous key %q the Secret keeps", name, k)
			}
		}
	}
}

// The records-sealed mark: absent on a Secret of the previous release, set
// once by MarkRecordsSealed, which keeps the key and writes nothing when the
// mark is there already.
func TestMarkRecordsSealed(t *testing.T) {
	w := &writes{}
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{DataKey: keyA}, nil)).
		WithInterceptorFuncs(w.funcs()).Build()
	if sealed, err := testSecret.RecordsSealed(t.Context(), c); err != nil || sealed {
		t.Fatalf("RecordsSealed = %v, %v on a Secret without the mark; want false", sealed, err)
	}
	for range 2 {
		if err := testSecret.MarkRecordsSealed(t.Context(), c, c); err != nil {
			t.Fatal(err)
		}
	}
	if sealed, err := testSecret.RecordsSealed(t.Context(), c); err != nil || !sealed {
		t.Fatalf("RecordsSealed = %v, %v after the mark; want true", sealed, err)
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("%d writes for two marks, want 1", n)
	}
	if !bytes.Equal(getKeySecret(t, c).Data[DataKey], keyA) {
		t.Fatal("the mark changed the key")
	}
}
