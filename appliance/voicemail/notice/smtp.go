package notice

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"pbx/appliance/config"
)

// ErrNoSTARTTLS: security is starttls and the server does not offer it.
var ErrNoSTARTTLS = errors.New("the SMTP server does not offer STARTTLS (security: starttls); nothing was sent in clear")

// deliver runs one SMTP conversation for m with settings s, the whole of
// it bounded by s.Timeout; ctx can cancel the dial only. beforeData runs once MAIL and RCPT are
// accepted, just before the DATA command; accepted reports whether the
// server accepted the message (its reply to the final dot was 2xx), which
// stays true even when the QUIT that follows fails.
func deliver(ctx context.Context, s *config.SMTP, m *email, beforeData func() error) (accepted bool, err error) {
	timeout := time.Duration(s.Timeout)
	if timeout <= 0 {
		timeout = config.DefaultSMTPTimeout
	}
	deadline := time.Now().Add(timeout)
	port := s.Port
	if port == 0 {
		port = config.SMTPPort(s.Security)
	}
	addr := net.JoinHostPort(s.Host, strconv.Itoa(port))
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, fmt.Errorf("smtp %s: %w", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return false, fmt.Errorf("smtp %s: %w", addr, err)
	}
	tlsCfg := &tls.Config{ServerName: s.Host, InsecureSkipVerify: s.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if s.Security == "tls" {
		tc := tls.Client(conn, tlsCfg)
		if err := tc.Handshake(); err != nil {
			return false, fmt.Errorf("smtp %s: tls: %w", addr, err)
		}
		conn = tc
	}
	c, err := smtp.NewClient(conn, s.Host)
	if err != nil {
		return false, fmt.Errorf("smtp %s: greeting: %w", addr, err)
	}
	defer c.Close()
	if err := c.Hello(heloName(s)); err != nil {
		return false, fmt.Errorf("smtp %s: helo: %w", addr, err)
	}
	if s.Security == "starttls" {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return false, fmt.Errorf("smtp %s: %w", addr, ErrNoSTARTTLS)
		}
		if err := c.StartTLS(tlsCfg); err != nil {
			return false, fmt.Errorf("smtp %s: starttls: %w", addr, err)
		}
	}
	if s.Username != "" {
		if err := authenticate(c, s); err != nil {
			return false, fmt.Errorf("smtp %s: %w", addr, err)
		}
	}
	if err := c.Mail(m.from); err != nil {
		return false, fmt.Errorf("smtp %s: mail from: %w", addr, err)
	}
	if err := c.Rcpt(m.to); err != nil {
		return false, fmt.Errorf("smtp %s: rcpt to: %w", addr, err)
	}
	if err := beforeData(); err != nil {
		return false, err
	}
	w, err := c.Data()
	if err != nil {
		return false, fmt.Errorf("smtp %s: data: %w", addr, err)
	}
	if _, err := w.Write(m.data); err != nil {
		return false, fmt.Errorf("smtp %s: data: %w", addr, err)
	}
	if err := w.Close(); err != nil {
		return false, fmt.Errorf("smtp %s: message not accepted: %w", addr, err)
	}
	_ = c.Quit() // the message is accepted; a failed QUIT changes nothing
	return true, nil
}

// heloName is smtp.helo, else this host's name.
func heloName(s *config.SMTP) string {
	if s.HELO != "" {
		return s.HELO
	}
	if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, " \r\n") {
		return h
	}
	return "localhost"
}

// authenticate uses AUTH PLAIN, or LOGIN when the server offers LOGIN and
// not PLAIN. The password travels in whatever protection security gave
// the connection: with security none it is in clear, as configured.
func authenticate(c *smtp.Client, s *config.SMTP) error {
	ok, params := c.Extension("AUTH")
	if !ok {
		return errors.New("username is set but the server offers no AUTH")
	}
	mechs := strings.Fields(strings.ToUpper(params))
	var a smtp.Auth
	switch {
	case slices.Contains(mechs, "PLAIN"):
		a = plainAuth{s.Username, string(s.Password)}
	case slices.Contains(mechs, "LOGIN"):
		a = &loginAuth{user: s.Username, pass: string(s.Password)}
	default:
		return fmt.Errorf("the server offers neither AUTH PLAIN nor LOGIN (it offers %s)", params)
	}
	if err := c.Auth(a); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// plainAuth is SASL PLAIN (RFC 4616) with an initial response. Unlike
// net/smtp.PlainAuth it leaves the choice of an unencrypted connection to
// the configuration (security none).
type plainAuth struct{ user, pass string }

func (a plainAuth) Start(*smtp.ServerInfo) (string, []byte, error) {
	return "PLAIN", []byte("\x00" + a.user + "\x00" + a.pass), nil
}

func (a plainAuth) Next(_ []byte, more bool) ([]byte, error) {
	if more {
		return nil, errors.New("unexpected challenge after AUTH PLAIN")
	}
	return nil, nil
}

// loginAuth is the LOGIN mechanism: the username, then the password, each
// in answer to a challenge.
type loginAuth struct {
	user, pass string
	step       int
}

func (a *loginAuth) Start(*smtp.ServerInfo) (string, []byte, error) {
	return "LOGIN", nil, nil
}

func (a *loginAuth) Next(_ []byte, more bool) ([]byte, error) {
	if !more {
		return nil, nil
	}
	a.step++
	switch a.step {
	case 1:
		return []byte(a.user), nil
	case 2:
		return []byte(a.pass), nil
	}
	return nil, errors.New("unexpected third challenge after AUTH LOGIN")
}
