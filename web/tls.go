package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"pbx/appliance/config"
)

// certManager serves the API's certificates and re-reads their files
// periodically. The live server configuration is swapped as a whole, so a
// handshake sees either the old or the new certificates, never a mix.
type certManager struct {
	cfg   config.TLS
	every time.Duration
	log   *slog.Logger

	current atomic.Pointer[tls.Config]
	sum     [sha256.Size]byte // digest of the files behind current
}

// pair is one certificate and key file.
type pair struct{ cert, key string }

func newCertManager(cfg config.TLS, log *slog.Logger) (*certManager, error) {
	m := &certManager{cfg: cfg, every: cfg.ReloadEvery.D(), log: log}
	if m.every <= 0 {
		m.every = config.DefaultTLSReload
	}
	if _, err := minVersion(cfg.MinVersion); err != nil {
		return nil, err
	}
	if len(m.pairs()) == 0 {
		return nil, errors.New("api.tls: no certificate (certFile/keyFile or certificates[])")
	}
	if _, err := m.reload(); err != nil {
		return nil, err
	}
	return m, nil
}

func minVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("api.tls.minVersion: %q is not 1.2 or 1.3", v)
}

func (m *certManager) pairs() []pair {
	var ps []pair
	if m.cfg.CertFile != "" || m.cfg.KeyFile != "" {
		ps = append(ps, pair{m.cfg.CertFile, m.cfg.KeyFile})
	}
	for _, c := range m.cfg.Certificates {
		ps = append(ps, pair{c.CertFile, c.KeyFile})
	}
	return ps
}

// reload reads every file; when they changed and all parse, it swaps the
// live configuration. It reports whether it swapped. On error the live
// configuration stays as it was.
func (m *certManager) reload() (bool, error) {
	h := sha256.New()
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return b, nil
	}
	var certs []tls.Certificate
	for _, p := range m.pairs() {
		if p.cert == "" || p.key == "" {
			return false, errors.New("api.tls: a certificate needs both certFile and keyFile")
		}
		cb, err := read(p.cert)
		if err != nil {
			return false, fmt.Errorf("api.tls: %w", err)
		}
		kb, err := read(p.key)
		if err != nil {
			return false, fmt.Errorf("api.tls: %w", err)
		}
		c, err := tls.X509KeyPair(cb, kb)
		if err != nil {
			return false, fmt.Errorf("api.tls: certificate %s with key %s: %w", p.cert, p.key, err)
		}
		certs = append(certs, c)
	}
	var pool *x509.CertPool
	if m.cfg.ClientCAFile != "" {
		b, err := read(m.cfg.ClientCAFile)
		if err != nil {
			return false, fmt.Errorf("api.tls: client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return false, fmt.Errorf("api.tls: client CA %s: no PEM certificate", m.cfg.ClientCAFile)
		}
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	if m.current.Load() != nil && bytes.Equal(sum[:], m.sum[:]) {
		return false, nil
	}
	ver, _ := minVersion(m.cfg.MinVersion)
	c := &tls.Config{
		MinVersion:   ver,
		Certificates: certs, // chosen by SNI among them, the first by default
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if pool != nil {
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	m.sum = sum
	m.current.Store(c)
	return true, nil
}

// serverConfig is the configuration of the listener: each handshake uses
// the live configuration.
func (m *certManager) serverConfig() *tls.Config {
	ver, _ := minVersion(m.cfg.MinVersion)
	return &tls.Config{
		MinVersion: ver,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return m.current.Load(), nil
		},
	}
}

// run re-reads the files every period until ctx ends.
func (m *certManager) run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			swapped, err := m.reload()
			switch {
			case err != nil:
				m.log.Error("api tls reload: keeping the current certificates", "err", err)
			case swapped:
				m.log.Info("api tls certificates reloaded")
			}
		}
	}
}
