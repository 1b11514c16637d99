package certs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Rotator keeps a self-managed webhook certificate valid on one replica. Every
// replica runs one (it needs no leader election: each serves the webhook). Each
// check it
//
//  1. renews the leaf or the CA in the shared Secret when they have less than
//     RenewBefore left (PublicKeyInfrastructure.Ensure; a replica that loses
//     the race for the Secret reads the winner's);
//  2. makes every webhook of the MutatingWebhookConfiguration trust the
//     current CA and, during a CA rotation, the previous one (a strategic
//     merge patch of the caBundles only, conditional on the resourceVersion it
//     read, retried on conflict: replicas never undo each other's bundle);
//  3. swaps the served files when the Secret holds another pair; the webhook
//     server's certificate watcher reloads them. A leaf of a new CA is served
//     only once the bundle trusts that CA and PropagationDelay has passed, so
//     the API server has seen the bundle before it meets the leaf.
type Rotator struct {
	PKI *PublicKeyInfrastructure
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
	// WebhookConfigName is the MutatingWebhookConfiguration whose caBundles are
	// kept; "" keeps none. configstamp never creates it here.
	WebhookConfigName string
	// Interval between checks; 0 is DefaultCheckInterval(PKI.RenewBefore).
	Interval time.Duration
	// PropagationDelay is how long a leaf of a new CA waits after the bundle
	// trusts the CA; 0 is DefaultPropagationDelay(PKI.RenewBefore).
	PropagationDelay time.Duration
	Log              logr.Logger
}

var _ manager.LeaderElectionRunnable = &Rotator{}

// DefaultCheckInterval is a tenth of renewBefore, between 1 s and 10 min: a
// replica picks up a pair another replica renewed long before its own expires.
func DefaultCheckInterval(renewBefore time.Duration) time.Duration {
	return min(max(renewBefore/10, time.Second), 10*time.Minute)
}

// DefaultPropagationDelay is a quarter of renewBefore, at most 5 s: an API
// server sees a MutatingWebhookConfiguration change within milliseconds
// through its informer; the delay covers a busy one.
func DefaultPropagationDelay(renewBefore time.Duration) time.Duration {
	return min(renewBefore/4, 5*time.Second)
}

func (r *Rotator) interval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultCheckInterval(r.PKI.RenewBefore)
}

func (r *Rotator) delay() time.Duration {
	if r.PropagationDelay > 0 {
		return r.PropagationDelay
	}
	return DefaultPropagationDelay(r.PKI.RenewBefore)
}

// Validate rejects lifetimes that would renew at every check or leave replicas
// no time to switch before the old certificate expires.
func (r *Rotator) Validate() error {
	p := r.PKI
	switch {
	case p.RenewBefore >= p.CertLifetime:
		return fmt.Errorf("--renew-before %v must be shorter than --cert-lifetime %v", p.RenewBefore, p.CertLifetime)
	case p.RenewBefore >= p.CALifetime:
		return fmt.Errorf("--renew-before %v must be shorter than --ca-lifetime %v", p.RenewBefore, p.CALifetime)
	case p.RenewBefore <= r.interval()+r.delay():
		return fmt.Errorf("--renew-before %v must be longer than the check interval %v plus the CA bundle propagation delay %v, "+
			"or replicas may serve an expired certificate", p.RenewBefore, r.interval(), r.delay())
	}
	return nil
}

// NeedLeaderElection is false: every replica serves the webhook.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start checks every Interval until ctx ends. A failed check is logged and
// retried at the next one; the served pair stays valid for RenewBefore.
func (r *Rotator) Start(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	r.Log.Info("rotating the webhook certificates", "interval", r.interval(), "renewBefore", r.PKI.RenewBefore,
		"certLifetime", r.PKI.CertLifetime, "caLifetime", r.PKI.CALifetime)
	t := time.NewTicker(r.interval())
	defer t.Stop()
	for {
		if err := r.Check(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "webhook certificate check failed; retrying", "in", r.interval())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check runs one round: renew, trust, serve.
func (r *Rotator) Check(ctx context.Context) error {
	ensured, err := r.PKI.Ensure(ctx)
	if err != nil {
		return err
	}
	want := ensured
	var bundleErr error
	if r.WebhookConfigName != "" {
		// The Secret as read after the MutatingWebhookConfiguration: at least as
		// new as Ensure's, and what the bundle now trusts.
		var secret *corev1.Secret
		if secret, bundleErr = r.syncCABundle(ctx); bundleErr == nil {
			want = bundleOf(secret)
		}
	}
	have := readFiles(r.CertDir)
	if sameFiles(have, want) {
		return bundleErr
	}
	if !bytes.Equal(bytes.TrimSpace(have.CACert), bytes.TrimSpace(want.CACert)) && !r.expiresWithin(have.TLSCert, r.delay()+time.Second) {
		// A leaf of another CA: the API server must trust that CA before it
		// meets the leaf. Keep serving the old leaf (still valid) meanwhile.
		if bundleErr != nil {
			return fmt.Errorf("not serving the certificate of the new CA yet: %w", bundleErr)
		}
		r.Log.Info("serving a certificate of a new CA after the CA bundle has propagated", "delay", r.delay())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.delay()):
		}
	}
	if err := want.WriteFiles(r.CertDir); err != nil {
		return fmt.Errorf("while writing the serving certificate: %w", err)
	}
	r.Log.Info("serving a new webhook certificate", "dir", r.CertDir, "notAfter", notAfter(want.TLSCert))
	return bundleErr
}

// expiresWithin: certPEM is unusable or expires within d.
func (r *Rotator) expiresWithin(certPEM []byte, d time.Duration) bool {
	c, err := pki.DecodeX509CertificateBytes(certPEM)
	return err != nil || r.PKI.now().Add(d).After(c.NotAfter)
}

// syncCABundle makes every webhook of the configuration trust exactly the CA
// bundle of the Secret and returns the Secret it used. It reads the
// configuration first and the Secret second, and patches on the condition that
// the configuration is unchanged: a replica with an older view of the Secret
// than the replica that last wrote the bundle cannot overwrite it (the Secret
// was renewed before that bundle was written, so it reads the renewal).
func (r *Rotator) syncCABundle(ctx context.Context) (*corev1.Secret, error) {
	c := r.PKI.Client
	for attempt := 0; attempt < 5; attempt++ {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: r.WebhookConfigName}, mwc); err != nil {
			return nil, fmt.Errorf("while reading MutatingWebhookConfiguration %s: %w", r.WebhookConfigName, err)
		}
		secret := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.PKI.Namespace, Name: r.PKI.SecretName}, secret); err != nil {
			return nil, fmt.Errorf("while reading secret %s/%s: %w", r.PKI.Namespace, r.PKI.SecretName, err)
		}
		want := r.PKI.caBundle(secret)
		if len(want) == 0 {
			return nil, fmt.Errorf("secret %s/%s holds no CA", r.PKI.Namespace, r.PKI.SecretName)
		}
		type entry struct {
			Name         string `json:"name"`
			ClientConfig struct {
				CABundle []byte `json:"caBundle"`
			} `json:"clientConfig"`
		}
		var stale []entry
		for _, w := range mwc.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, want) {
				e := entry{Name: w.Name}
				e.ClientConfig.CABundle = want
				stale = append(stale, e)
			}
		}
		if len(stale) == 0 {
			return secret, nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": mwc.ResourceVersion},
			"webhooks": stale,
		})
		if err != nil {
			return nil, err
		}
		if err := c.Patch(ctx, mwc, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return nil, fmt.Errorf("while patching the CA bundle of MutatingWebhookConfiguration %s: %w", r.WebhookConfigName, err)
		}
		r.Log.Info("updated the webhook CA bundle", "configuration", r.WebhookConfigName, "webhooks", len(stale),
			"cas", bytes.Count(want, []byte("BEGIN CERTIFICATE")))
		return secret, nil
	}
	return nil, errors.New("while updating the webhook CA bundle: too many conflicts")
}
