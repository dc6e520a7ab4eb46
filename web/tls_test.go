package web

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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue makes a leaf certificate for names (server) or a client
// certificate (client true), returning certificate and key PEM.
func (ca *testCA) issue(t testing.TB, serial int64, client bool, names ...string) ([]byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// writePair writes a certificate and key under dir and returns the pair.
func writePair(t testing.TB, dir, name string, cert, key []byte) config.Certificate {
	t.Helper()
	c := config.Certificate{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	replaceFile(t, c.CertFile, cert)
	replaceFile(t, c.KeyFile, key)
	return c
}

// replaceFile writes data by rename, as certificate renewal tools do.
func replaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func withTLS(tc *config.TLS) envOption {
	return func(a *config.API, _ *Options) { a.TLS = tc }
}

// tlsGet fetches /v1/health over a new connection and returns the
// certificate the server presented.
func tlsGet(e *env, cfg *tls.Config) (*x509.Certificate, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get(e.base + "/v1/health")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, &net.AddrError{Err: resp.Status}
	}
	return resp.TLS.PeerCertificates[0], nil
}

func TestTLSChoosesCertificateBySNI(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "test CA")
	ac, ak := ca.issue(t, 10, false, "a.test")
	bc, bk := ca.issue(t, 20, false, "b.test")
	a, b := writePair(t, dir, "a", ac, ak), writePair(t, dir, "b", bc, bk)
	e := newEnv(t, withTLS(&config.TLS{CertFile: a.CertFile, KeyFile: a.KeyFile, Certificates: []config.Certificate{b}}))
	if !strings.HasPrefix(e.base, "https://") {
		t.Fatal(e.base)
	}
	for name, serial := range map[string]int64{"a.test": 10, "b.test": 20} {
		cert, err := tlsGet(e, &tls.Config{RootCAs: ca.pool(), ServerName: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cert.SerialNumber.Int64() != serial {
			t.Fatalf("%s: served serial %v", name, cert.SerialNumber)
		}
	}
	// HTTP/2 is negotiated and served.
	h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: ca.pool(), ServerName: "a.test"}}}
	resp, err := h2.Get(e.base + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 401 || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("HTTP/2: %s %d", resp.Proto, resp.StatusCode)
	}
	// An unknown name gets the first certificate, which does not verify.
	if _, err := tlsGet(e, &tls.Config{RootCAs: ca.pool(), ServerName: "c.test"}); err == nil {
		t.Fatal("c.test verified")
	}
	// Plain HTTP to the TLS port is refused.
	resp, err = http.Get("http://" + strings.TrimPrefix(e.base, "https://") + "/v1/health")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served")
		}
	}
}

func TestTLSMutual(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	sc, sk := ca.issue(t, 10, false, "api.test")
	srv := writePair(t, dir, "srv", sc, sk)
	caFile := filepath.Join(dir, "clients.pem")
	replaceFile(t, caFile, ca.pem)
	e := newEnv(t, withTLS(&config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: caFile}))

	base := &tls.Config{RootCAs: ca.pool(), ServerName: "api.test"}
	if _, err := tlsGet(e, base); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	pair := func(c *testCA) tls.Certificate {
		cp, kp := c.issue(t, 99, true, "operator")
		cert, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	strange := base.Clone()
	strange.Certificates = []tls.Certificate{pair(other)}
	if _, err := tlsGet(e, strange); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	good := base.Clone()
	good.Certificates = []tls.Certificate{pair(ca)}
	if _, err := tlsGet(e, good); err != nil {
		t.Fatalf("a client certificate of the CA: %v", err)
	}
}

func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "test CA")
	c1, k1 := ca.issue(t, 1, false, "api.test")
	p := writePair(t, dir, "api", c1, k1)
	e := newEnv(t, withTLS(&config.TLS{CertFile: p.CertFile, KeyFile: p.KeyFile, ReloadEvery: config.Duration(40 * time.Millisecond)}))
	cfg := &tls.Config{RootCAs: ca.pool(), ServerName: "api.test"}
	served := func() int64 {
		t.Helper()
		cert, err := tlsGet(e, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.Int64()
	}
	if s := served(); s != 1 {
		t.Fatalf("serial %d", s)
	}
	c2, k2 := ca.issue(t, 2, false, "api.test")
	replaceFile(t, p.KeyFile, k2)
	replaceFile(t, p.CertFile, c2)
	deadline := time.Now().Add(5 * time.Second)
	for served() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("renewed certificate not served within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Broken files: the current certificate stays, and the log says so.
	replaceFile(t, p.CertFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
	for !strings.Contains(e.logs.String(), "keeping the current certificates") {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("broken certificate not logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := served(); s != 2 {
		t.Fatalf("after broken files: serial %d", s)
	}
	// A certificate that does not match its key is broken too.
	failures := strings.Count(e.logs.String(), "keeping the current certificates")
	c3, _ := ca.issue(t, 3, false, "api.test")
	replaceFile(t, p.CertFile, c3)
	for strings.Count(e.logs.String(), "keeping the current certificates") < failures+2 {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("mismatched pair not logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := served(); s != 2 {
		t.Fatalf("after a mismatched pair: serial %d", s)
	}
}

func TestTLSMinVersion(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "test CA")
	c, k := ca.issue(t, 1, false, "api.test")
	p := writePair(t, dir, "api", c, k)
	e := newEnv(t, withTLS(&config.TLS{CertFile: p.CertFile, KeyFile: p.KeyFile, MinVersion: "1.3"}))
	if _, err := tlsGet(e, &tls.Config{RootCAs: ca.pool(), ServerName: "api.test", MaxVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("TLS 1.2 accepted with minVersion 1.3")
	}
	if _, err := tlsGet(e, &tls.Config{RootCAs: ca.pool(), ServerName: "api.test", MinVersion: tls.VersionTLS13}); err != nil {
		t.Fatal(err)
	}
	e12 := newEnv(t, withTLS(&config.TLS{CertFile: p.CertFile, KeyFile: p.KeyFile, MinVersion: "1.2"}))
	if _, err := tlsGet(e12, &tls.Config{RootCAs: ca.pool(), ServerName: "api.test", MaxVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("TLS 1.2 refused with minVersion 1.2: %v", err)
	}
	if _, err := tlsGet(e12, &tls.Config{RootCAs: ca.pool(), ServerName: "api.test", MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
}

func TestTLSStartupErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "test CA")
	c, k := ca.issue(t, 1, false, "api.test")
	p := writePair(t, dir, "api", c, k)
	bad := map[string]config.TLS{
		"missing file": {CertFile: filepath.Join(dir, "nope.crt"), KeyFile: p.KeyFile},
		"no pair":      {},
		"key only":     {KeyFile: p.KeyFile},
		"bad version":  {CertFile: p.CertFile, KeyFile: p.KeyFile, MinVersion: "1.1"},
		"bad CA":       {CertFile: p.CertFile, KeyFile: p.KeyFile, ClientCAFile: p.KeyFile},
	}
	for name, tc := range bad {
		tc := tc
		if _, err := New(Options{API: config.API{Enabled: true, Tokens: testTokens(), TLS: &tc}}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
