package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// HashKeyDataKey is the key of the HMAC key in its Secret.
const HashKeyDataKey = "key"

// PreviousKeysDataKey holds the previous keys in the same Secret, newest
// first, one base64 line each (at most stamp.KeepPrevious): records and halts
// sealed with a previous key stay verifiable across a restart in the middle
// of a rotation. The Secret's order is the one every replica keeps.
const PreviousKeysDataKey = "previous-keys"

// previousKeys returns the usable previous keys a key Secret holds, newest first.
func previousKeys(secret *corev1.Secret) [][]byte {
	var out [][]byte
	for line := range strings.Lines(string(secret.Data[PreviousKeysDataKey])) {
		if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line)); err == nil && len(k) >= minKeyLength {
			out = append(out, k)
		}
	}
	return out
}

func formatPreviousKeys(keys [][]byte) []byte {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// +kubebuilder:rbac:groups="",namespace=configstamp-system,resources=secrets,verbs=create;update

// minKeyLength is the shortest HMAC key accepted from the Secret.
const minKeyLength = 16

// AnnotationRecordsSealed, on the key Secret, says that this installation
// seals its rollout records (rollout.AnnotationSeal) and has taken over those
// the previous release wrote unsealed (Adopter): from then on an unsealed
// record counts for nothing. A Secret made by this release carries it from
// the start, so there is nothing to take over.
const AnnotationRecordsSealed = "configstamp.io/records-sealed"

func createKeySecret(ctx context.Context, c client.Client, namespace, name string, key []byte) error {
	return c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "configstamp"},
			Annotations: map[string]string{AnnotationRecordsSealed: "true"}},
		Data: map[string][]byte{HashKeyDataKey: key},
	})
}

// EnsureHashKey returns the per-installation HMAC key kept in the Secret
// namespace/name, creating it with 32 random bytes on first start, in a
// Keyring with the previous keys the Secret keeps. Replicas racing to create
// it all end up with the winner's key.
func EnsureHashKey(ctx context.Context, c client.Client, namespace, name string) (*stamp.Keyring, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	for attempt := 0; attempt < 3; attempt++ {
		secret := &corev1.Secret{}
		err := c.Get(ctx, key, secret)
		if err == nil {
			if k := secret.Data[HashKeyDataKey]; len(k) >= minKeyLength {
				keys := stamp.NewKeyring(k)
				keys.AddPrevious(previousKeys(secret)...)
				return keys, nil
			}
			return nil, fmt.Errorf("secret %s holds no usable %q (at least 16 bytes); delete it to make a new key", key, HashKeyDataKey)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("while reading hash key secret %s: %w", key, err)
		}
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if err := createKeySecret(ctx, c, namespace, name, k); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return nil, fmt.Errorf("while creating hash key secret %s: %w", key, err)
		}
		return stamp.NewKeyring(k), nil
	}
	return nil, fmt.Errorf("while ensuring hash key secret %s: gave up after conflicts", key)
}

// KeyWatcher keeps the Keyring on the key in the Secret, on every replica
// (webhook and reconciler alike), so all replicas converge on one key:
//   - a new key in the Secret (an operator's deliberate rotation, a restore)
//     is put in force, and OnChange is called (the reconciler re-baselines
//     every workload while this process still knows the previous key: a key
//     change rolls nothing);
//   - the previous keys are written back into the Secret (previous-<key id>,
//     at most stamp's bound), so a restart in the middle of a rotation still
//     knows them: records and halts sealed with them stay valid;
//   - a deleted Secret is created again with the key in force, so an
//     accidental `kubectl delete secret` changes nothing at all.
//
// It watches the one Secret by name (a field selector), outside the manager's
// cache, whose transform keeps digests only.
type KeyWatcher struct {
	Clientset kubernetes.Interface
	Client    client.Client
	Namespace string
	Name      string
	Keys      *stamp.Keyring
	// Reader reads the Secret live before writing it (the manager's cache
	// keeps Secrets as digests only). Nil: Client.
	Reader client.Reader
	// OnChange is called after the key in force changed.
	OnChange func(ctx context.Context)
	Log      logr.Logger
}

// NeedLeaderElection: every replica hashes (the webhook), so every replica
// follows the key.
func (w *KeyWatcher) NeedLeaderElection() bool { return false }

// Start runs until ctx ends.
func (w *KeyWatcher) Start(ctx context.Context) error {
	lw := cache.NewFilteredListWatchFromClient(w.Clientset.CoreV1().RESTClient(), "secrets", w.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.Name).String()
		})
	informer := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.seen(ctx, obj) },
		UpdateFunc: func(_, obj any) { w.seen(ctx, obj) },
		DeleteFunc: func(any) { w.deleted(ctx) },
	})
	if err != nil {
		return fmt.Errorf("while watching the hash key secret: %w", err)
	}
	informer.Run(ctx.Done())
	return nil
}

func (w *KeyWatcher) seen(ctx context.Context, obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	key := secret.Data[HashKeyDataKey]
	if len(key) < minKeyLength {
		w.Log.Error(nil, "hash key secret holds no usable key; keeping the key in force", "secret", w.Namespace+"/"+w.Name)
		return
	}
	w.Keys.MergePrevious(previousKeys(secret))
	retired := w.Keys.Key()
	if w.Keys.Set(key) {
		w.keepPrevious(ctx, retired)
		w.Log.Info("hash key changed; workloads are re-baselined, nothing rolls", "keyID", w.Keys.Current().KeyID())
		if w.OnChange != nil {
			w.OnChange(ctx)
		}
	}
}

// keepPrevious puts the key this process just retired at the head of the
// Secret's previous keys (unless it is there already), within
// stamp.KeepPrevious. Each replica writes only when it sees the key change,
// and only a key the Secret lacks, so replicas never fight over the list; the
// Secret's list is what a restarted replica loads. A conflict is retried on a
// fresh read.
func (w *KeyWatcher) keepPrevious(ctx context.Context, retired []byte) {
	reader := w.Reader
	if reader == nil {
		reader = w.Client
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret := &corev1.Secret{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, secret); err != nil {
			return err
		}
		stored := previousKeys(secret)
		if bytes.Equal(secret.Data[HashKeyDataKey], retired) || slices.ContainsFunc(stored, func(k []byte) bool { return bytes.Equal(k, retired) }) {
			return nil
		}
		merged := append([][]byte{retired}, stored...)
		secret.Data[PreviousKeysDataKey] = formatPreviousKeys(merged[:min(len(merged), stamp.KeepPrevious)])
		return w.Client.Update(ctx, secret)
	})
	if err != nil {
		w.Log.Error(err, "while keeping the previous hash key in the secret")
	}
}

func (w *KeyWatcher) deleted(ctx context.Context) {
	err := createKeySecret(ctx, w.Client, w.Namespace, w.Name, w.Keys.Key())
	switch {
	case err == nil:
		w.Log.Info("hash key secret was deleted; created it again with the key in force", "secret", w.Namespace+"/"+w.Name)
	case apierrors.IsAlreadyExists(err): // a peer was first: its key arrives as an update
	default:
		w.Log.Error(err, "while creating the hash key secret again")
	}
}
