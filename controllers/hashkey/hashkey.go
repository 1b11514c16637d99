// Package hashkey owns the installation's HMAC key and the Secret that keeps
// it, for its whole life: made at first start (Secret.Load), put in force on
// every replica when an operator rotates it (Watcher), its retired keys kept
// in the Secret so records and halts sealed with them stay valid across a
// restart, the Secret made again when it is deleted, and the mark that says
// this installation's rollout records are sealed (Secret.MarkRecordsSealed).
// Nothing else in configstamp reads or writes that Secret.
package hashkey

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// DataKey is the key of the HMAC key in its Secret.
const DataKey = "key"

// PreviousDataKey holds the previous keys in the same Secret, newest first,
// one base64 line each (at most stamp.KeepPrevious): records and halts sealed
// with a previous key stay verifiable across a restart in the middle of a
// rotation. The Secret's order is the one every replica keeps.
const PreviousDataKey = "previous-keys"

// AnnotationRecordsSealed, on the key Secret, says that this installation
// seals its rollout records (rollout.AnnotationSeal) and has taken over those
// the previous release wrote unsealed (controllers.Adopter): from then on an
// unsealed record counts for nothing. A Secret made by this release carries
// it from the start, so there is nothing to take over.
const AnnotationRecordsSealed = "configstamp.io/records-sealed"

// minLength is the shortest HMAC key accepted from the Secret.
const minLength = 16

// +kubebuilder:rbac:groups="",namespace=configstamp-system,resources=secrets,verbs=create;update

// Secret names the Secret that keeps the key.
type Secret struct {
	Namespace, Name string
}

func (s Secret) objectKey() client.ObjectKey {
	return client.ObjectKey{Namespace: s.Namespace, Name: s.Name}
}

func (s Secret) String() string { return s.Namespace + "/" + s.Name }

// Load returns the installation key in a Keyring with the previous keys the
// Secret keeps, creating the Secret with 32 random bytes on first start.
// Replicas racing to create it all end up with the winner's key.
func (s Secret) Load(ctx context.Context, c client.Client) (*stamp.Keyring, error) {
	for attempt := 0; attempt < 3; attempt++ {
		secret := &corev1.Secret{}
		err := c.Get(ctx, s.objectKey(), secret)
		if err == nil {
			if k := secret.Data[DataKey]; len(k) >= minLength {
				keys := stamp.NewKeyring(k)
				keys.AddPrevious(previousKeys(secret)...)
				return keys, nil
			}
			return nil, fmt.Errorf("secret %s holds no usable %q (at least %d bytes); delete it to make a new key", s, DataKey, minLength)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("while reading hash key secret %s: %w", s, err)
		}
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if err := s.create(ctx, c, k); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return nil, fmt.Errorf("while creating hash key secret %s: %w", s, err)
		}
		return stamp.NewKeyring(k), nil
	}
	return nil, fmt.Errorf("while ensuring hash key secret %s: gave up after conflicts", s)
}

// RecordsSealed reports whether the Secret carries AnnotationRecordsSealed.
func (s Secret) RecordsSealed(ctx context.Context, r client.Reader) (bool, error) {
	secret := &corev1.Secret{}
	if err := r.Get(ctx, s.objectKey(), secret); err != nil {
		return false, fmt.Errorf("while reading the hash key secret: %w", err)
	}
	return secret.Annotations[AnnotationRecordsSealed] != "", nil
}

// MarkRecordsSealed sets AnnotationRecordsSealed on the Secret, read live
// through r; a conflict is retried on a fresh read.
func (s Secret) MarkRecordsSealed(ctx context.Context, r client.Reader, c client.Client) error {
	return s.update(ctx, r, c, func(secret *corev1.Secret) bool {
		if secret.Annotations[AnnotationRecordsSealed] != "" {
			return false
		}
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[AnnotationRecordsSealed] = "true"
		return true
	})
}

// keepPrevious puts retired at the head of the Secret's previous keys
// (unless it is there already, or is the key in force), within
// stamp.KeepPrevious.
func (s Secret) keepPrevious(ctx context.Context, r client.Reader, c client.Client, retired []byte) error {
	return s.update(ctx, r, c, func(secret *corev1.Secret) bool {
		stored := previousKeys(secret)
		if bytes.Equal(secret.Data[DataKey], retired) || slices.ContainsFunc(stored, func(k []byte) bool { return bytes.Equal(k, retired) }) {
			return false
		}
		merged := append([][]byte{retired}, stored...)
		secret.Data[PreviousDataKey] = formatPreviousKeys(merged[:min(len(merged), stamp.KeepPrevious)])
		return true
	})
}

// update reads the Secret live, lets change edit it, and writes it when
// change says it changed; a conflict is retried on a fresh read.
func (s Secret) update(ctx context.Context, r client.Reader, c client.Client, change func(*corev1.Secret) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		secret := &corev1.Secret{}
		if err := r.Get(ctx, s.objectKey(), secret); err != nil {
			return err
		}
		if !change(secret) {
			return nil
		}
		return c.Update(ctx, secret)
	})
}

func (s Secret) create(ctx context.Context, c client.Client, key []byte) error {
	return c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "configstamp"},
			Annotations: map[string]string{AnnotationRecordsSealed: "true"}},
		Data: map[string][]byte{DataKey: key},
	})
}

// previousKeys returns the usable previous keys a key Secret holds, newest first.
func previousKeys(secret *corev1.Secret) [][]byte {
	var out [][]byte
	for line := range strings.Lines(string(secret.Data[PreviousDataKey])) {
		if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line)); err == nil && len(k) >= minLength {
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
