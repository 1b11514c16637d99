package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The cert directory is laid out like a kubelet Secret volume, so that a
// rotation is one atomic switch and a reader never sees a new certificate with
// an old key:
//
//	..data -> ..version-123            (swapped with one rename)
//	..version-123/{tls.crt,tls.key,ca.crt}
//	tls.crt -> ..data/tls.crt          (and tls.key, ca.crt)
//
// controller-runtime's certificate watcher follows the symlinks; removing the
// old version directory after the swap makes it re-read the pair at once.
const (
	dataLink      = "..data"
	versionPrefix = "..version-"
)

var fileNames = []string{KeyTLSCert, KeyTLSKey, KeyCACert}

// WriteFiles writes tls.crt, tls.key (for controller-runtime's webhook server)
// and ca.crt into dir, replacing what is there in one atomic switch.
func (b *Bundle) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	version, err := os.MkdirTemp(dir, versionPrefix)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{KeyTLSCert: b.TLSCert, KeyTLSKey: b.TLSKey, KeyCACert: b.CACert} {
		if err := os.WriteFile(filepath.Join(version, name), data, 0o600); err != nil {
			_ = os.RemoveAll(version)
			return fmt.Errorf("while writing %s: %w", name, err)
		}
	}
	if err := replaceSymlink(dir, dataLink, filepath.Base(version)); err != nil {
		_ = os.RemoveAll(version)
		return err
	}
	for _, name := range fileNames {
		target := filepath.Join(dataLink, name)
		if have, err := os.Readlink(filepath.Join(dir, name)); err == nil && have == target {
			continue
		}
		// First write into this directory (or plain files left by an older
		// configstamp): the names become links into ..data.
		if err := replaceSymlink(dir, name, target); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), versionPrefix) && e.Name() != filepath.Base(version) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("while removing the old certificate files: %w", err)
			}
		}
	}
	return nil
}

// replaceSymlink points dir/name at target with one rename.
func replaceSymlink(dir, name, target string) error {
	tmp := filepath.Join(dir, "..tmp-"+name)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("while switching %s: %w", name, err)
	}
	return nil
}

// readFiles returns what dir serves now (missing files read as empty).
func readFiles(dir string) *Bundle {
	read := func(name string) []byte {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		return data
	}
	return &Bundle{CACert: read(KeyCACert), TLSCert: read(KeyTLSCert), TLSKey: read(KeyTLSKey)}
}

// sameFiles: a and b serve the same pair under the same CA.
func sameFiles(a, b *Bundle) bool {
	return bytes.Equal(a.TLSCert, b.TLSCert) && bytes.Equal(a.TLSKey, b.TLSKey) && bytes.Equal(a.CACert, b.CACert)
}

// FilesValid is a readiness check: tls.crt and tls.key in dir form a key pair
// whose certificate is currently valid.
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
