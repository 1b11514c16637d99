package hashkey

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Watcher keeps the Keyring on the key in the Secret, on every replica
// (webhook and reconciler alike), so all replicas converge on one key:
//   - a new key in the Secret (an operator's deliberate rotation, a restore)
//     is put in force, and OnChange is called (the reconciler re-baselines
//     every workload while this process still knows the previous key: a key
//     change rolls nothing);
//   - the retired key is written back into the Secret's previous keys (at
//     most stamp.KeepPrevious), so a restart in the middle of a rotation
//     still knows it: records and halts sealed with it stay valid. Each
//     replica writes only when it sees the key change, and only a key the
//     Secret lacks, so replicas never fight over the list;
//   - a deleted Secret is created again with the key in force, so an
//     accidental `kubectl delete secret` changes nothing at all.
//
// It watches the one Secret by name (a field selector), outside the manager's
// cache, whose transform keeps digests only.
type Watcher struct {
	Secret
	Clientset kubernetes.Interface
	Client    client.Client
	// Reader reads the Secret live before writing it (the manager's cache
	// keeps Secrets as digests only). Nil: Client.
	Reader client.Reader
	Keys   *stamp.Keyring
	// OnChange is called after the key in force changed.
	OnChange func(ctx context.Context)
	Log      logr.Logger
}

// NeedLeaderElection: every replica hashes (the webhook), so every replica
// follows the key.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start runs until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
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

func (w *Watcher) seen(ctx context.Context, obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	key := secret.Data[DataKey]
	if len(key) < minLength {
		w.Log.Error(nil, "hash key secret holds no usable key; keeping the key in force", "secret", w.String())
		return
	}
	w.Keys.MergePrevious(previousKeys(secret))
	retired := w.Keys.Key()
	if !w.Keys.Set(key) {
		return
	}
	reader := w.Reader
	if reader == nil {
		reader = w.Client
	}
	if err := w.keepPrevious(ctx, reader, w.Client, retired); err != nil {
		w.Log.Error(err, "while keeping the previous hash key in the secret")
	}
	w.Log.Info("hash key changed; workloads are re-baselined, nothing rolls", "keyID", w.Keys.Current().KeyID())
	if w.OnChange != nil {
		w.OnChange(ctx)
	}
}

func (w *Watcher) deleted(ctx context.Context) {
	err := w.create(ctx, w.Client, w.Keys.Key())
	switch {
	case err == nil:
		w.Log.Info("hash key secret was deleted; created it again with the key in force", "secret", w.String())
	case apierrors.IsAlreadyExists(err): // a peer was first: its key arrives as an update
	default:
		w.Log.Error(err, "while creating the hash key secret again")
	}
}
