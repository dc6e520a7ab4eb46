package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Credentials the mail sink accepts.
const (
	sinkUser = "pbx@example.com"
	sinkPass = "sink-s3cret"
)

// mailSink is a real SMTP server (go-smtp) on a fixed loopback address
// that offers STARTTLS with a self-signed certificate and AUTH PLAIN only
// over TLS, and keeps every email it accepts. It can be stopped and started
// again on the same address, as a relay that goes down.
type mailSink struct {
	t    *testing.T
	addr string
	cert tls.Certificate

	mu   sync.Mutex
	srv  *smtp.Server
	data [][]byte // accepted emails
}

func newMailSink(t *testing.T) *mailSink {
	t.Helper()
	m := &mailSink{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), cert: sinkCert(t)}
	t.Cleanup(m.stop)
	return m
}

// start serves SMTP on the sink's address.
func (m *mailSink) start() {
	m.t.Helper()
	s := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{m: m}, nil }))
	s.Domain = "mx.test"
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{m.cert}}
	s.ErrorLog = sinkQuiet{}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	m.srv = s
	m.mu.Unlock()
	go s.Serve(ln)
}

// stop closes the server: connections are refused until start.
func (m *mailSink) stop() {
	m.mu.Lock()
	s := m.srv
	m.srv = nil
	m.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

func (m *mailSink) emails() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.data...)
}

type sinkQuiet struct{}

func (sinkQuiet) Printf(string, ...any) {}
func (sinkQuiet) Println(...any)        {}

type sinkSession struct {
	m      *mailSink
	authed bool
}

func (s *sinkSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *sinkSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != sinkUser || pass != sinkPass {
			return errors.New("bad credentials")
		}
		s.authed = true
		return nil
	}), nil
}

func (s *sinkSession) Mail(string, *smtp.MailOptions) error {
	if !s.authed {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	return nil
}

func (s *sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }

func (s *sinkSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.m.mu.Lock()
	s.m.data = append(s.m.data, b)
	s.m.mu.Unlock()
	return nil
}

func (s *sinkSession) Reset()        {}
func (s *sinkSession) Logout() error { return nil }

// sinkCert is a self-signed certificate for 127.0.0.1.
func sinkCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mx.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// wavAttachment is the audio/wav attachment of an email, decoded, and its
// file name.
func wavAttachment(t *testing.T, email []byte) (string, []byte) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(email))
	if err != nil {
		t.Fatalf("email: %v", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		t.Fatalf("email of type %q (%v), want multipart", mt, err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return "", nil
		}
		if err != nil {
			t.Fatalf("email part: %v", err)
		}
		if ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type")); ct != "audio/wav" {
			continue
		}
		if enc := part.Header.Get("Content-Transfer-Encoding"); !strings.EqualFold(enc, "base64") {
			t.Fatalf("attachment encoded %q, want base64", enc)
		}
		b, err := io.ReadAll(base64.NewDecoder(base64.StdEncoding, part))
		if err != nil {
			t.Fatalf("attachment: %v", err)
		}
		return part.FileName(), b
	}
}

// mailConfig is voicemailConfig with bob's mailbox notifying by email
// through sink (STARTTLS, AUTH, a self-signed certificate).
func mailConfig(t *testing.T, sink *mailSink) pbxConfig {
	cfg := voicemailConfig(t)
	_, port, _ := net.SplitHostPort(sink.addr)
	cfg.Recording += fmt.Sprintf(`  smtp:
    host: 127.0.0.1
    port: %s
    security: starttls
    username: %s
    password: %s
    from: "PBX <pbx@example.com>"
    helo: pbx.test
    timeout: 10s
    insecureSkipVerify: true
`, port, sinkUser, sinkPass)
	cfg.Demo = "  mailboxes:\n    - extension: \"101\"\n      email: bob@example.com\n"
	return cfg
}

// waitNoticesSent polls until the sink holds n emails and the PBX's
// outbox has nothing left to send (a sent notice leaves notices/pending).
func waitNoticesSent(t *testing.T, p *pbxProc, sink *mailSink, n int) [][]byte {
	t.Helper()
	pending := filepath.Join(p.dataDir, "notices", "pending")
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := sink.emails()
		left, _ := os.ReadDir(pending)
		if len(got) >= n && len(left) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d emails (want %d), %d notices pending; log:\n%s", len(got), n, len(left), tail(withoutDebug(p.log.Since()), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNotices: every message of bob's has exactly one email, the one
// whose attachment is named after it, and that attachment is the message's
// audio as the API serves it; no email is left over.
func checkNotices(t *testing.T, c apiClient, emails [][]byte, ms []vmMessage) {
	t.Helper()
	if len(emails) != len(ms) {
		t.Fatalf("%d emails for %d messages", len(emails), len(ms))
	}
	for _, m := range ms {
		code, audio := c.do("GET", "/v1/voicemail/demo/101/"+m.ID+"/audio")
		if code != 200 || len(audio) < 1000 {
			t.Fatalf("audio of %s: %d, %d bytes", m.ID, code, len(audio))
		}
		n := 0
		for _, e := range emails {
			name, wav := wavAttachment(t, e)
			if name != "voicemail-101-"+m.ID+".wav" {
				continue
			}
			n++
			if !bytes.Equal(wav, audio) {
				t.Errorf("message %s: the attachment (%d bytes) is not its audio (%d bytes)", m.ID, len(wav), len(audio))
			}
		}
		if n != 1 {
			t.Errorf("message %s: %d emails, want exactly 1", m.ID, n)
		}
	}
}

// waitNoticeRetry waits for the outbox to log a failed attempt after the
// log's mark.
func waitNoticeRetry(t *testing.T, p *pbxProc) {
	t.Helper()
	p.waitLog("voicemail notice not sent: will retry", 20*time.Second)
}

// TestVoicemailEmailNotices: bob's mailbox notifies bob@example.com through
// a go-smtp relay on loopback (STARTTLS with a self-signed certificate,
// AUTH PLAIN). A message's email arrives with the message's WAV attached
// byte for byte; with the relay down at deposit time, then up, the email
// arrives exactly once; with the relay down, the PBX killed (SIGKILL)
// after the deposit and started again once the relay is back, the email
// arrives exactly once.
func TestVoicemailEmailNotices(t *testing.T) {
	t.Setenv("PBX_TEST_NOTICE_BACKOFF", "300ms")
	sink := newMailSink(t)
	sink.start()
	cfg := mailConfig(t, sink)
	p := startPBX(t, cfg)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort), token: vmToken}

	// 1. The relay is up: the email arrives with the recording.
	leaveMessage(t, p, 6000)
	ms := waitMessages(t, p, c, 1)
	checkNotices(t, c, waitNoticesSent(t, p, sink, 1), ms)

	// 2. The relay is down when the message is left: retried, then sent
	// once when it is back.
	sink.stop()
	p.log.mark()
	leaveMessage(t, p, 6000)
	ms = waitMessages(t, p, c, 2)
	waitNoticeRetry(t, p)
	if n := len(sink.emails()); n != 1 {
		t.Fatalf("%d emails while the relay was down, want 1", n)
	}
	sink.start()
	checkNotices(t, c, waitNoticesSent(t, p, sink, 2), ms)

	// 3. The relay is down, the PBX is killed before the notice could go,
	// the relay comes back, then the PBX: sent once after the restart.
	sink.stop()
	p.log.mark()
	leaveMessage(t, p, 6000)
	ms = waitMessages(t, p, c, 3)
	waitNoticeRetry(t, p)
	p.kill()
	sink.start()
	p.start()
	checkNotices(t, c, waitNoticesSent(t, p, sink, 3), ms)
	if !p.log.ContainsSince("voicemail notice sent") {
		t.Errorf("the restarted PBX did not log the notice it sent")
	}
}
