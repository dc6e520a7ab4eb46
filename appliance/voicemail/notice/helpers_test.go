package notice

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/datadir"
)

// syncBuffer is a log sink safe for the outbox's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// relay holds the settings the outbox reads at each attempt.
type relay struct{ p atomic.Pointer[config.SMTP] }

func (r *relay) get(string) *config.SMTP { return r.p.Load() }

// settingsFor points at the server with the given security.
func settingsFor(t *testing.T, addr, security string) *config.SMTP {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &config.SMTP{Host: host, Port: p, Security: security, Username: "vm@example.com", Password: "s3cret",
		From: "PBX Voicemail <pbx@example.com>", Timeout: config.Duration(5 * time.Second), HELO: "pbx.test",
		InsecureSkipVerify: true}
}

// box is an outbox under test with its Run loop.
type box struct {
	*Outbox
	dir    string
	relay  *relay
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

func openBox(t *testing.T, dir string, s *config.SMTP, opts Options) *box {
	t.Helper()
	b := &box{dir: dir, relay: &relay{}, logs: &syncBuffer{}}
	b.relay.p.Store(s)
	opts.DataDir, opts.Settings = dir, b.relay.get
	if opts.BackoffMin == 0 {
		opts.BackoffMin, opts.BackoffMax = 20*time.Millisecond, 80*time.Millisecond
	}
	o, err := OpenWith(opts, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.Outbox = o
	return b
}

func (b *box) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() { defer close(b.done); b.Run(ctx) }()
	t.Cleanup(b.stop)
}

// stop ends Run and waits for it (a restart of the PBX, gracefully).
func (b *box) stop() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
		b.cancel = nil
	}
}

func (b *box) jobFiles(t *testing.T, sub string) []*Job {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(b.dir, "notices", sub))
	var jobs []*Job
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a rewrite in progress
		}
		j, err := readJob(filepath.Join(b.dir, "notices", sub, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testWAV writes a small WAV-like recording and returns its path and bytes.
func testWAV(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	b := []byte("RIFF\x00\x00\x00\x00WAVEfmt ")
	for i := range 20000 {
		b = append(b, byte(i*7+i/13))
	}
	p := filepath.Join(dir, "1700000000-abc.wav")
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func testNotice(wav string) Notice {
	return Notice{Tenant: "acme", Extension: "1001", To: "Alice <alice@example.com>", From: "+15551234567",
		FromName: "Bob Smith", Duration: 42 * time.Second, ReceivedAt: time.Date(2026, 11, 23, 14, 5, 0, 0, time.UTC),
		MessageID: "1700000000-abc", WAV: wav}
}

// parsed is an email as a mail client reads it.
type parsed struct {
	header     mail.Header
	subject    string
	body       string
	attachment []byte
	attachType string
	filename   string
}

func parseEmail(t *testing.T, data []byte) parsed {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var p parsed
	p.header = msg.Header
	p.subject, err = new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/mixed" {
		t.Fatalf("content type %q: %v", mt, err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		raw, _ := io.ReadAll(part) // quoted-printable is decoded by the reader
		switch {
		case ct == "text/plain":
			p.body = string(raw)
		case part.Header.Get("Content-Transfer-Encoding") == "base64":
			p.attachType, p.filename = ct, part.FileName()
			p.attachment, err = base64.StdEncoding.DecodeString(strings.ReplaceAll(string(raw), "\n", ""))
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// jobPath is where job id's file is while pending.
func (o *Outbox) jobPath(id string) string { return o.sp.Path(id) }

// readJob reads the job file at path.
func readJob(path string) (*Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeJob(b)
}

// writeJob replaces the job file at path (as a crash would leave it).
func writeJob(path string, j *Job) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFile(path, append(b, '\n'), 0o640)
}
