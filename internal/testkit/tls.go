package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority a test generates, to serve and trust TLS on 127.0.0.1.
type CA struct {
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	File   string // its certificate as PEM, for FLOW_KAFKA_TLS_CA_FILE
	Pool   *x509.CertPool
	dir    string
	serial int64
}

// Pair is a certificate the CA issued, as files and as a tls.Certificate.
type Pair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// NewCA generates a CA valid for a day, written under the test's temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir(), Pool: x509.NewCertPool(), serial: 1}
	ca.Pool.AddCert(cert)
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue issues a certificate for name (a server's for 127.0.0.1 and localhost, or a
// client's), valid from notBefore to notAfter; the zero times mean an hour ago to a day on.
func (ca *CA) Issue(t testing.TB, name string, notBefore, notAfter time.Time) Pair {
	t.Helper()
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "EC PRIVATE KEY", keyDER)
	p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ServerTLS is the listener config of a broker serving pair; with clients non-nil it demands
// a client certificate that CA signed (mutual TLS).
func ServerTLS(pair Pair, clients *CA) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{pair.TLS}, MinVersion: tls.VersionTLS12}
	if clients != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, clients.Pool
	}
	return cfg
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
