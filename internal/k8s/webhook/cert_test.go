package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a certificate for name and its key, in PEM.
func selfSigned(t *testing.T, name string) (cert, key []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{name}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// replace writes data to path as the kubelet updates a Secret's volume:
// a new file put in place.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func servedName(t *testing.T, k *KeyPair) string {
	t.Helper()
	c, err := k.GetCertificate(nil)
	if err != nil || c == nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.Subject.CommonName
}

// A new certificate in the files is served from the next handshake on; a
// pair that does not load (cert changed, key not yet) leaves the last good
// one served, and says so.
func TestKeyPairFollowsItsFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	certA, keyA := selfSigned(t, "first")
	replace(t, certFile, certA)
	replace(t, keyFile, keyA)
	k, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	k.Log = func(f string, a ...any) { logged.WriteString(f) }
	if n := servedName(t, k); n != "first" {
		t.Fatalf("serving %q, want first", n)
	}
	certB, keyB := selfSigned(t, "second")
	replace(t, certFile, certB)
	if n := servedName(t, k); n != "first" || !strings.Contains(logged.String(), "not reloaded") {
		t.Errorf("with a new certificate and the old key: serving %q (want first), logged %q", n, logged.String())
	}
	replace(t, keyFile, keyB)
	if n := servedName(t, k); n != "second" {
		t.Errorf("after both files changed: serving %q, want second", n)
	}
	if _, err := LoadKeyPair(filepath.Join(dir, "none"), keyFile); err == nil {
		t.Error("a missing certificate file loaded")
	}
}
