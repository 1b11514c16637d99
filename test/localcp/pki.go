package localcp

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki holds the paths of the files written by writePKI.
type pki struct {
	caCert, caKey           string
	servingCert, servingKey string
	adminCert, adminKey     string
	nodeCert, nodeKey       string // kubelet client: system:node:<RealNodeName>
	saKey, saPub            string
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
	der  []byte
}

// writePKI creates a CA, a kube-apiserver serving certificate (for loopback,
// the `kubernetes` Service IP and extraIPs), an admin client certificate
// (system:masters), a kubelet client certificate for RealNodeName and the
// service-account signing key in dir. ECDSA keys keep generation fast; the
// service-account key is RSA.
func writePKI(dir string, extraIPs ...net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"), servingKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		nodeCert: filepath.Join(dir, "kubelet-client.crt"), nodeKey: filepath.Join(dir, "kubelet-client.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock skew
	ca, err := newCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "localcp-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
	if err != nil {
		return nil, err
	}
	serving, err := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now,
		NotAfter:    now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		// 10.96.0.1 is the `kubernetes` Service IP of --service-cluster-ip-range.
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)}, extraIPs...),
	}, ca)
	if err != nil {
		return nil, err
	}
	clientCert := func(cn, group string) (*keyPair, error) {
		return newCert(&x509.Certificate{
			Subject:     pkix.Name{CommonName: cn, Organization: []string{group}},
			NotBefore:   now,
			NotAfter:    now.Add(365 * 24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, ca)
	}
	admin, err := clientCert("admin", "system:masters")
	if err != nil {
		return nil, err
	}
	// The Node authorizer and NodeRestriction know a kubelet by this name and group.
	node, err := clientCert("system:node:"+RealNodeName, "system:nodes")
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	for _, w := range []struct {
		path string
		kp   *keyPair
	}{{p.caCert, ca}, {p.servingCert, serving}, {p.adminCert, admin}, {p.nodeCert, node}} {
		if err := writePEM(w.path, "CERTIFICATE", w.kp.der); err != nil {
			return nil, err
		}
	}
	for _, w := range []struct {
		path string
		key  crypto.Signer
	}{{p.caKey, ca.key}, {p.servingKey, serving.key}, {p.adminKey, admin.key}, {p.nodeKey, node.key}, {p.saKey, saKey}} {
		der, err := x509.MarshalPKCS8PrivateKey(w.key)
		if err != nil {
			return nil, err
		}
		if err := writePEM(w.path, "PRIVATE KEY", der); err != nil {
			return nil, err
		}
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.saPub, "PUBLIC KEY", pub)
}

// newCert signs tmpl with parent, or self-signs it when parent is nil.
func newCert(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("creating certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, der: der}, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// writeKubeconfig writes an admin kubeconfig with embedded certificate data.
func writeKubeconfig(path, server string, p *pki) error {
	return writeClientKubeconfig(path, server, p.caCert, p.adminCert, p.adminKey)
}

// writeClientKubeconfig writes a kubeconfig that authenticates with the
// client certificate certFile, embedding the certificate data.
func writeClientKubeconfig(path, server, caFile, certFile, keyFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	const name = "localcp"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}
