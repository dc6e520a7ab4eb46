package notice

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"pbx/appliance/config"
)

func TestNoticeArrivesOverSTARTTLSWithPlainAuthAndAttachment(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN", "LOGIN")
	dir := t.TempDir()
	wav, audio := testWAV(t, dir)
	b := openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	if err := b.Enqueue(testNotice(wav)); err != nil {
		t.Fatal(err)
	}
	if n := len(b.jobFiles(t, "pending")); n != 1 {
		t.Fatalf("Enqueue returned with %d job files on disk", n)
	}
	b.start(t)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 })
	eventually(t, "the job file's removal", func() bool { return len(b.jobFiles(t, "pending")) == 0 && b.Pending() == 0 })

	m := srv.messages()[0]
	if !m.tls || m.mech != "PLAIN" || m.helo != "pbx.test" || m.from != "pbx@example.com" || m.to != "alice@example.com" {
		t.Errorf("conversation: tls %v, mech %q, helo %q, from %q, to %q", m.tls, m.mech, m.helo, m.from, m.to)
	}
	p := parseEmail(t, m.data)
	if p.subject != "New voicemail from +15551234567 (0:42)" {
		t.Errorf("subject %q", p.subject)
	}
	if !bytes.Equal(p.attachment, audio) || p.attachType != "audio/wav" || p.filename != "voicemail-1001-1700000000-abc.wav" {
		t.Errorf("attachment: %d bytes (want %d), type %q, name %q", len(p.attachment), len(audio), p.attachType, p.filename)
	}
	for _, want := range []string{"mailbox 1001", "Bob Smith <+15551234567>", "Monday 23 November 2026 14:05 UTC", "0:42", "The recording is attached."} {
		if !strings.Contains(p.body, want) {
			t.Errorf("body lacks %q:\n%s", want, p.body)
		}
	}
	if got := p.header.Get("To"); !strings.Contains(got, "alice@example.com") {
		t.Errorf("To %q", got)
	}
	if got := p.header.Get("Message-Id"); !strings.HasPrefix(got, "<voicemail-") || !strings.HasSuffix(got, "@example.com>") {
		t.Errorf("Message-ID %q", got)
	}
	if strings.Contains(b.logs.String(), "s3cret") {
		t.Error("the password was logged")
	}
}

func TestLoginOnlyWhenPlainIsNotOffered(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", false, true, "LOGIN")
	dir := t.TempDir()
	wav, _ := testWAV(t, dir)
	b := openBox(t, dir, settingsFor(t, srv.addr, "tls"), Options{})
	if err := b.Enqueue(testNotice(wav)); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 })
	if m := srv.messages()[0]; m.mech != "LOGIN" || !m.tls {
		t.Errorf("mechanism %q, tls %v", m.mech, m.tls)
	}
}

func TestDeliverSecurityChecks(t *testing.T) {
	m := &email{from: "pbx@example.com", to: "alice@example.com", data: []byte("Subject: x\r\n\r\nx\r\n")}
	noop := func() error { return nil }

	// starttls required but not offered: abort before MAIL, nothing in clear.
	plain := startServer(t, "127.0.0.1:0", false, false)
	_, err := deliver(context.Background(), settingsFor(t, plain.addr, "starttls"), m, noop)
	if !errors.Is(err, ErrNoSTARTTLS) || !strings.Contains(err.Error(), "does not offer STARTTLS") {
		t.Errorf("starttls not offered: %v", err)
	}
	if n := plain.mailCommands(); n != 0 || len(plain.messages()) != 0 {
		t.Errorf("the client went on without TLS: %d MAIL commands", n)
	}

	// A self-signed certificate is refused unless insecureSkipVerify.
	tlsSrv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	s := settingsFor(t, tlsSrv.addr, "starttls")
	s.InsecureSkipVerify = false
	if _, err := deliver(context.Background(), s, m, noop); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("unverifiable certificate accepted: %v", err)
	}
	if len(tlsSrv.messages()) != 0 {
		t.Error("mail sent over an unverified connection")
	}

	// Wrong password: an error naming the failure, never the password.
	s = settingsFor(t, tlsSrv.addr, "starttls")
	s.Password = "wrong-password"
	if _, err := deliver(context.Background(), s, m, noop); err == nil || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("bad password: %v", err)
	}

	// security none with no username: plain SMTP, no AUTH.
	s = settingsFor(t, plain.addr, "none")
	s.Username = ""
	if ok, err := deliver(context.Background(), s, m, noop); !ok || err != nil || len(plain.messages()) != 1 {
		t.Errorf("security none: accepted %v, %v", ok, err)
	}
}

func TestTimeoutBoundsTheConversation(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and never greets
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	s := settingsFor(t, ln.Addr().String(), "none")
	s.Timeout = config.Duration(300 * time.Millisecond)
	start := time.Now()
	_, err = deliver(context.Background(), s, &email{}, func() error { return nil })
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("silent server: %v after %v", err, took)
	}
}

func TestServerDownThenUpDeliversExactlyOnce(t *testing.T) {
	// A port with nothing listening yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	wav, audio := testWAV(t, dir)
	b := openBox(t, dir, settingsFor(t, addr, "starttls"), Options{})
	if err := b.Enqueue(testNotice(wav)); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "two failed attempts", func() bool {
		j := b.jobFiles(t, "pending")
		return len(j) == 1 && j[0].Attempts >= 2 && j[0].State == StatePending && j[0].LastError != ""
	})
	// The PBX restarts while the server is still down: the job survives.
	b.stop()
	b = openBox(t, dir, settingsFor(t, addr, "starttls"), Options{})
	if b.Pending() != 1 {
		t.Fatalf("after a restart %d jobs pending", b.Pending())
	}
	srv := startServer(t, addr, true, false, "PLAIN")
	b.start(t)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 })
	eventually(t, "the job's end", func() bool { return b.Pending() == 0 && len(b.jobFiles(t, "pending")) == 0 })
	if p := parseEmail(t, srv.messages()[0].data); !bytes.Equal(p.attachment, audio) {
		t.Error("attachment differs")
	}
	// Another restart sends nothing more.
	b.stop()
	b = openBox(t, dir, settingsFor(t, addr, "starttls"), Options{})
	if b.Pending() != 0 {
		t.Errorf("a sent notice is pending again after a restart")
	}
	if n := len(srv.messages()); n != 1 {
		t.Errorf("%d copies delivered", n)
	}
}

func TestRefusingServerDelaysThenDelivers(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	srv.setRefuse(&smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"})
	dir := t.TempDir()
	wav, _ := testWAV(t, dir)
	b := openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	if err := b.Enqueue(testNotice(wav)); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "refused attempts", func() bool {
		j := b.jobFiles(t, "pending")
		return len(j) == 1 && j[0].Attempts >= 3 && strings.Contains(j[0].LastError, "451")
	})
	if !strings.Contains(b.logs.String(), "will retry") {
		t.Errorf("no retry log line:\n%s", b.logs.String())
	}
	srv.setRefuse(nil)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 && b.Pending() == 0 })
}

func TestJobLeftSendingIsSentAgainWithTheSameMessageID(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	dir := t.TempDir()
	wav, _ := testWAV(t, dir)
	b := openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	var crashed []byte // the job file as a crash during DATA would leave it
	b.beforeData = func(j *Job) {
		on, err := readJob(b.jobPath(j.ID))
		if err != nil || on.State != StateSending {
			t.Errorf("before DATA the job on disk is %+v, %v", on, err)
		}
		crashed, _ = os.ReadFile(b.jobPath(j.ID))
	}
	if err := b.Enqueue(testNotice(wav)); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 && b.Pending() == 0 })
	b.stop()

	// The process died after the server accepted DATA and before the sent
	// mark: the job file still says sending.
	if err := os.WriteFile(filepath.Join(dir, "notices", "pending", idOf(t, crashed)+".json"), crashed, 0o640); err != nil {
		t.Fatal(err)
	}
	b = openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	if b.Pending() != 1 || !strings.Contains(b.logs.String(), "sending it again with the same Message-ID") {
		t.Fatalf("a job left sending: %d pending, logs:\n%s", b.Pending(), b.logs.String())
	}
	b.start(t)
	eventually(t, "the second copy", func() bool { return len(srv.messages()) == 2 && b.Pending() == 0 })
	first, second := parseEmail(t, srv.messages()[0].data), parseEmail(t, srv.messages()[1].data)
	if id := first.header.Get("Message-Id"); id == "" || id != second.header.Get("Message-Id") {
		t.Errorf("Message-IDs %q and %q", id, second.header.Get("Message-Id"))
	}
}

func TestJobMarkedSentIsNeverSentAgain(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	dir := t.TempDir()
	b := openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	// A crash between the sent mark and the deletion.
	j := &Job{ID: "0123abcd", State: StateSent, Notice: testNotice(""), CreatedAt: time.Now()}
	if err := writeJob(b.jobPath(j.ID), j); err != nil {
		t.Fatal(err)
	}
	b = openBox(t, dir, settingsFor(t, srv.addr, "starttls"), Options{})
	if b.Pending() != 0 || len(b.jobFiles(t, "pending")) != 0 {
		t.Errorf("a sent job was loaded: %d pending", b.Pending())
	}
}

func idOf(t *testing.T, jobFile []byte) string {
	t.Helper()
	i := bytes.Index(jobFile, []byte(`"id": "`))
	if i < 0 {
		t.Fatalf("no id in %s", jobFile)
	}
	rest := jobFile[i+7:]
	return string(rest[:bytes.IndexByte(rest, '"')])
}

func TestMaxAttachAndMailboxAttachFalse(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	dir := t.TempDir()
	wav, audio := testWAV(t, dir)
	s := settingsFor(t, srv.addr, "starttls")
	s.MaxAttach = config.Duration(30 * time.Second)
	b := openBox(t, dir, s, Options{})
	long := testNotice(wav) // 42 s, over maxAttach
	short := testNotice(wav)
	short.Duration, short.MessageID = 20*time.Second, "short"
	off := short
	off.NoAttach, off.MessageID = true, "off"
	for _, n := range []Notice{long, short, off} {
		if err := b.Enqueue(n); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t)
	eventually(t, "three emails", func() bool { return len(srv.messages()) == 3 })
	var with, without int
	for _, m := range srv.messages() {
		p := parseEmail(t, m.data)
		switch {
		case p.attachment == nil && strings.Contains(p.body, "Dial your voicemail"):
			without++
		case bytes.Equal(p.attachment, audio) && strings.Contains(p.subject, "(0:20)"):
			with++
		default:
			t.Errorf("unexpected email: subject %q, %d attached bytes", p.subject, len(p.attachment))
		}
	}
	if with != 1 || without != 2 {
		t.Errorf("%d with the recording, %d without; want 1 and 2", with, without)
	}
}

func TestCustomTemplatesAndMissingRecording(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", true, false, "PLAIN")
	dir := t.TempDir()
	s := settingsFor(t, srv.addr, "starttls")
	s.Subject = "Nachricht für {{.Extension}} von {{.FromName}}"
	s.Body = "{{.Tenant}}|{{.Extension}}|{{.From}}|{{.FromName}}|{{.Duration}}|{{.ReceivedAt.Format \"2006-01-02T15:04\"}}|{{.MessageID}}|{{.Attached}}"
	b := openBox(t, dir, s, Options{})
	if err := b.Enqueue(testNotice(filepath.Join(dir, "deleted-already.wav"))); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "the email", func() bool { return len(srv.messages()) == 1 })
	p := parseEmail(t, srv.messages()[0].data)
	if p.subject != "Nachricht für 1001 von Bob Smith" {
		t.Errorf("subject %q", p.subject)
	}
	if want := "acme|1001|+15551234567|Bob Smith|0:42|2026-11-23T14:05|1700000000-abc|false"; strings.TrimSpace(p.body) != want {
		t.Errorf("body %q, want %q", p.body, want)
	}
	if p.attachment != nil {
		t.Error("a missing recording was attached")
	}
}

func TestRender(t *testing.T) {
	v := Vars{From: "1002", Duration: Duration(65*time.Second + 400*time.Millisecond)}
	if got, err := render("subject", "", DefaultSubject, v); err != nil || got != "New voicemail from 1002 (1:05)" {
		t.Errorf("built-in subject %q, %v", got, err)
	}
	if _, err := render("body", "{{.Nope}}", DefaultBody, v); err == nil {
		t.Error("unknown variable rendered")
	}
	if got := oneLine("a\r\nBcc: x@y\n b"); got != "a Bcc: x@y b" {
		t.Errorf("oneLine %q", got)
	}
	if got := Duration(3*time.Minute + 2*time.Second).String(); got != "3:02" {
		t.Errorf("duration %q", got)
	}
}
