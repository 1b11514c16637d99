package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// FilesValid is a readiness check for cert-manager mode: tls.crt and tls.key in
// dir form a key pair whose certificate is currently valid.
func FilesValid(dir string) func(*http.Request) error {
	return func(*http.Request) error {
		certFile, keyFile := filepath.Join(dir, KeyTLSCert), filepath.Join(dir, KeyTLSKey)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("serving certificate not usable: %w", err)
		}
		if len(pair.Certificate) == 0 {
			return fmt.Errorf("serving certificate %s is empty", certFile)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return err
		}
		if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
			return fmt.Errorf("serving certificate valid from %s to %s, not now", leaf.NotBefore, leaf.NotAfter)
		}
		return nil
	}
}
