package controllers

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HashKeyDataKey is the key of the HMAC key in its Secret.
const HashKeyDataKey = "key"

// +kubebuilder:rbac:groups="",namespace=configstamp-system,resources=secrets,verbs=create;update

// EnsureHashKey returns the per-installation HMAC key kept in the Secret
// namespace/name, creating it with 32 random bytes on first start. Replicas
// racing to create it all end up with the winner's key.
func EnsureHashKey(ctx context.Context, c client.Client, namespace, name string) ([]byte, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	for attempt := 0; attempt < 3; attempt++ {
		secret := &corev1.Secret{}
		err := c.Get(ctx, key, secret)
		if err == nil {
			if k := secret.Data[HashKeyDataKey]; len(k) >= 16 {
				return k, nil
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
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "configstamp"}},
			Data: map[string][]byte{HashKeyDataKey: k},
		}
		if err := c.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return nil, fmt.Errorf("while creating hash key secret %s: %w", key, err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("while ensuring hash key secret %s: gave up after conflicts", key)
}
