package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/webhook"
)

// tlsOptions are the TLS settings of both HTTPS servers (webhook and metrics).
//
// HTTP/2 is off unless enableHTTP2: the HTTP/2 Stream Cancellation ("rapid
// reset", CVE-2023-44487) and the HTTP/2 CONTINUATION flood let one client
// exhaust a server's CPU (GHSA-qppj-fm5r-hxr3, GHSA-4374-p667-p6c8). Offering
// only http/1.1 in ALPN makes a client that asks for h2 alone fail the
// handshake, and every other client speak HTTP/1.1.
func tlsOptions(enableHTTP2 bool) []func(*tls.Config) {
	if enableHTTP2 {
		return nil
	}
	return []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
}

// metricsOptions serves /metrics like a kubebuilder v4 project: over HTTPS,
// each scrape authenticated (TokenReview) and authorized (SubjectAccessReview,
// get on the non-resource URL /metrics, the metrics-reader ClusterRole) by
// the API server. Without a certificate in certDir the server makes a
// self-signed one in memory. secure=false serves plain HTTP with no
// authentication, for a loopback address only (tests, benchmarks).
func metricsOptions(addr string, secure bool, certDir string, tlsOpts []func(*tls.Config), log logr.Logger) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if !secure {
		if addr != "0" && !isLoopback(addr) {
			log.Info("WARNING: /metrics is served over plain HTTP without authentication on a non-loopback address; "+
				"use --metrics-secure (the default) anywhere but on 127.0.0.1", "address", addr)
		}
		return opts
	}
	opts.FilterProvider = metricsAuth
	opts.TLSOpts = tlsOpts
	opts.CertDir = certDir
	return opts
}

// isLoopback: addr (host:port) binds a loopback address only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// certProvider decides the certificate mode, once: the certs.Provider of
// --cert-mode and the address the webhook server binds.
func certProvider(o *options, c client.Client, log logr.Logger) (certs.Provider, string, error) {
	switch o.certMode {
	case "self":
		hosts, host, err := selfHosts(o)
		if err != nil {
			return nil, "", err
		}
		if o.webhookHost != "" {
			host = o.webhookHost
		}
		// The current CA and, during a CA rotation, the previous one: other
		// replicas may still serve a certificate the previous CA signed.
		register := func(ctx context.Context, caBundle []byte) error {
			cc := admissionregistrationv1.WebhookClientConfig{CABundle: caBundle}
			if o.webhookURL != "" {
				u := o.webhookURL + webhook.Path
				cc.URL = &u
			} else {
				p := webhook.Path
				cc.Service = &admissionregistrationv1.ServiceReference{Namespace: o.namespace, Name: o.webhookService, Path: &p}
			}
			if err := webhook.Register(ctx, c, webhook.ScopedConfiguration(o.webhookConfigName, o.scope, cc, o.kinds)); err != nil {
				return err
			}
			if !o.applyWarnings {
				return webhook.UnregisterWarnings(ctx, c, o.webhookConfigName)
			}
			// The same CA bundle and base, the warning webhook's path.
			wc := cc
			if o.webhookURL != "" {
				wc.URL = ptr.To(o.webhookURL + webhook.WarningsPath)
			} else {
				wc.Service = &admissionregistrationv1.ServiceReference{Namespace: o.namespace, Name: o.webhookService, Path: ptr.To(webhook.WarningsPath)}
			}
			return webhook.RegisterWarnings(ctx, c, webhook.WarningsConfiguration(o.webhookConfigName, o.scope, wc))
		}
		return &certs.SelfManaged{
			PKI: &certs.PublicKeyInfrastructure{
				Client: c, Namespace: o.namespace, SecretName: o.tlsSecret, Hosts: hosts,
				CALifetime: o.caLifetime, CertLifetime: o.certLifetime, RenewBefore: o.renewBefore,
				Log: log,
			},
			CertDir: o.certDir, WebhookConfigName: o.webhookConfigName, CheckInterval: o.certCheckInterval,
			Register: register, Log: log,
		}, host, nil
	case "cert-manager":
		return &certs.CertManagerFiles{CertDir: o.certDir}, o.webhookHost, nil
	default:
		return nil, "", fmt.Errorf("unknown --cert-mode %q (self or cert-manager)", o.certMode)
	}
}

// selfHosts returns the names the serving certificate must cover and the bind
// host implied by --webhook-url (its IP, so a laptop does not listen on every
// interface).
func selfHosts(o *options) ([]string, string, error) {
	if o.webhookURL != "" {
		u, err := url.Parse(o.webhookURL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" {
			return nil, "", fmt.Errorf("--webhook-url %q must be an https URL with a host", o.webhookURL)
		}
		host := ""
		if net.ParseIP(u.Hostname()) != nil {
			host = u.Hostname()
		}
		return []string{u.Hostname()}, host, nil
	}
	svc := o.webhookService + "." + o.namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}, "", nil
}
