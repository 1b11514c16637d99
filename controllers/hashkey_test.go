package controllers

import (
	"bytes"
	"context"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/controllers/stamp"
)

var (
	keyA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	keyB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	keyC = []byte("cccccccccccccccccccccccccccccccc")
)

func keySecret(data map[string][]byte, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: adoptSystemNS, Name: adoptSecret, Annotations: annotations}, Data: data}
}

func getKeySecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: adoptSystemNS, Name: adoptSecret}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A restart in the middle of a rotation still knows the previous keys the
// Secret keeps: records and halts sealed with them verify.
func TestEnsureHashKeyReadsPreviousKeys(t *testing.T) {
	prev := stamp.NewHasher(keyB).KeyID()
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{
		HashKeyDataKey:              keyA,
		previousKeyPrefix + prev:    keyB,
		previousKeyPrefix + "short": []byte("too short"),
	}, nil)).Build()
	keys, err := EnsureHashKey(t.Context(), c, adoptSystemNS, adoptSecret)
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
func TestEnsureHashKeyCreatesSealedSecret(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	keys, err := EnsureHashKey(t.Context(), c, adoptSystemNS, adoptSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := getKeySecret(t, c)
	if s.Annotations[AnnotationRecordsSealed] == "" {
		t.Fatalf("created secret's annotations %v lack %s", s.Annotations, AnnotationRecordsSealed)
	}
	if !bytes.Equal(s.Data[HashKeyDataKey], keys.Key()) || len(keys.Key()) < minKeyLength {
		t.Fatal("the created secret does not hold the key in force")
	}
}

// After a rotation the watcher writes the key it replaced into the Secret
// (previous-<id>), once: the update that follows changes nothing more.
func TestKeyWatcherKeepsPreviousKeys(t *testing.T) {
	w := &writes{}
	c := fake.NewClientBuilder().WithObjects(keySecret(map[string][]byte{HashKeyDataKey: keyA}, nil)).
		WithInterceptorFuncs(w.funcs()).Build()
	changes := 0
	kw := &KeyWatcher{Client: c, Namespace: adoptSystemNS, Name: adoptSecret, Keys: stamp.NewKeyring(keyA),
		OnChange: func(context.Context) { changes++ }, Log: logr.Discard()}

	// The informer's first sight of the secret: nothing to keep.
	kw.seen(t.Context(), getKeySecret(t, c))
	if n := w.total(); n != 0 || changes != 0 {
		t.Fatalf("%d writes, %d key changes on the first sight of an unchanged secret; want none", n, changes)
	}

	// An operator rotates the key.
	s := getKeySecret(t, c)
	s.Data[HashKeyDataKey] = keyB
	if err := c.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	before := w.total()
	kw.seen(t.Context(), getKeySecret(t, c))
	if changes != 1 || !bytes.Equal(kw.Keys.Key(), keyB) {
		t.Fatalf("key changes %d, key in force %q; want the new key put in force once", changes, kw.Keys.Key())
	}
	stored := getKeySecret(t, c)
	oldID := stamp.NewHasher(keyA).KeyID()
	if got := stored.Data[previousKeyPrefix+oldID]; !bytes.Equal(got, keyA) {
		t.Fatalf("secret holds %q under %s (keys %v); want the replaced key", got, previousKeyPrefix+oldID, dataKeys(stored))
	}
	if !bytes.Equal(stored.Data[HashKeyDataKey], keyB) {
		t.Fatal("keeping the previous key changed the key in force")
	}
	if w.total()-before != 1 {
		t.Fatalf("%d writes for one rotation, want 1", w.total()-before)
	}

	// The update event of that write: nothing more to do.
	before = w.total()
	kw.seen(t.Context(), stored)
	if n := w.total() - before; n != 0 || changes != 1 {
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
