package notice

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// mailServer is a real SMTP server on loopback (go-smtp) that records
// what it accepts.
type mailServer struct {
	t     *testing.T
	srv   *smtp.Server
	addr  string
	mechs []string // AUTH mechanisms offered; none means no AUTH
	user  string
	pass  string

	mu       sync.Mutex
	received []received
	mails    int   // MAIL commands seen
	refuse   error // answer to RCPT when set
}

type received struct {
	helo, from, to, mech string
	tls                  bool
	data                 []byte
}

// startServer serves SMTP on addr ("127.0.0.1:0" for any port). With
// starttls it offers STARTTLS; with implicit the listener is TLS.
func startServer(t *testing.T, addr string, starttls, implicit bool, mechs ...string) *mailServer {
	t.Helper()
	m := &mailServer{t: t, mechs: mechs, user: "vm@example.com", pass: "s3cret"}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{m: m, c: c}, nil
	}))
	s.Domain = "mx.test"
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.ErrorLog = quietLog{}
	cert := selfSigned(t)
	if starttls || implicit {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	var ln net.Listener
	var err error
	if implicit {
		ln, err = tls.Listen("tcp", addr, s.TLSConfig)
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	m.srv, m.addr = s, ln.Addr().String()
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return m
}

func (m *mailServer) messages() []received {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]received(nil), m.received...)
}

func (m *mailServer) mailCommands() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mails
}

func (m *mailServer) setRefuse(err error) {
	m.mu.Lock()
	m.refuse = err
	m.mu.Unlock()
}

type quietLog struct{}

func (quietLog) Printf(string, ...any) {}
func (quietLog) Println(...any)        {}

type session struct {
	m      *mailServer
	c      *smtp.Conn
	mech   string
	authed bool
	cur    received
}

func (s *session) AuthMechanisms() []string { return s.m.mechs }

func (s *session) Auth(mech string) (sasl.Server, error) {
	check := func(user, pass string) error {
		if user != s.m.user || pass != s.m.pass {
			return errors.New("bad credentials")
		}
		s.authed, s.mech = true, mech
		return nil
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(identity, user, pass string) error { return check(user, pass) }), nil
	case sasl.Login:
		return &loginServer{check: check}, nil
	}
	return nil, smtp.ErrAuthUnknownMechanism
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	s.m.mu.Lock()
	s.m.mails++
	s.m.mu.Unlock()
	if len(s.m.mechs) > 0 && !s.authed {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	_, tls := s.c.TLSConnectionState()
	s.cur = received{helo: s.c.Hostname(), from: from, mech: s.mech, tls: tls}
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.m.mu.Lock()
	refuse := s.m.refuse
	s.m.mu.Unlock()
	if refuse != nil {
		return refuse
	}
	s.cur.to = to
	return nil
}

func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	s.m.mu.Lock()
	s.m.received = append(s.m.received, s.cur)
	s.m.mu.Unlock()
	return nil
}

func (s *session) Reset()        {}
func (s *session) Logout() error { return nil }

// loginServer is the server side of AUTH LOGIN (go-sasl has only the client).
type loginServer struct {
	check func(user, pass string) error
	step  int
	user  string
}

func (l *loginServer) Next(resp []byte) ([]byte, bool, error) {
	l.step++
	switch l.step {
	case 1:
		if resp != nil { // initial response: the username
			l.user = string(resp)
			l.step++
			return []byte("Password:"), false, nil
		}
		return []byte("Username:"), false, nil
	case 2:
		l.user = string(resp)
		return []byte("Password:"), false, nil
	case 3:
		return nil, true, l.check(l.user, string(resp))
	}
	return nil, false, errors.New("unexpected response")
}

// selfSigned is a certificate for 127.0.0.1 that no client trusts.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "mx.test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
