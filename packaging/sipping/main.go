// Command sipping sends a SIP OPTIONS request over UDP and exits 0 when the answer
// is 200 OK. The install test uses it to check that an installed pbx answers SIP,
// with nothing but the standard library on the host.
//
// Usage:
//
//	sipping [-timeout 10s] [-interval 500ms] 127.0.0.1:5060
//
// The request is resent every interval until a final response arrives or the
// timeout passes, so the daemon may still be starting when sipping begins.
// Exit status: 0 on 200, 1 on another final response or no answer, 2 on usage.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sipping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	interval := fs.Duration("interval", 500*time.Millisecond, "resend the request this often")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *timeout <= 0 || *interval <= 0 {
		fmt.Fprintln(stderr, "usage: sipping [-timeout D] [-interval D] HOST:PORT")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := Options(ctx, fs.Arg(0), *interval)
	if err != nil {
		fmt.Fprintf(stderr, "sipping: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d %s", fs.Arg(0), resp.Status, resp.Reason)
	if resp.Server != "" {
		fmt.Fprintf(stdout, " (Server: %s)", resp.Server)
	}
	fmt.Fprintln(stdout)
	if resp.Status != 200 {
		return 1
	}
	return 0
}

// Response is the part of a SIP response sipping reports.
type Response struct {
	Status int
	Reason string
	Server string
}

// Options sends OPTIONS to addr over UDP, resending every interval, and returns the
// first final response that belongs to the request. It gives up when ctx ends.
func Options(ctx context.Context, addr string, interval time.Duration) (Response, error) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return Response{}, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	branch, callID := "z9hG4bK-"+token(), token()
	req := optionsRequest(conn.LocalAddr().(*net.UDPAddr), addr, branch, callID)

	deadline, _ := ctx.Deadline()
	buf := make([]byte, 65535)
	var lastErr error = context.DeadlineExceeded
	for ctx.Err() == nil {
		if _, err := conn.Write(req); err != nil {
			lastErr = fmt.Errorf("send: %w", err)
		}
		next := time.Now().Add(interval)
		if !deadline.IsZero() && deadline.Before(next) {
			next = deadline
		}
		if err := conn.SetReadDeadline(next); err != nil {
			return Response{}, err
		}
		// Read until this round's deadline: provisional and stray answers are skipped.
		for {
			n, err := conn.Read(buf)
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					// Typically "connection refused": nothing listens yet.
					lastErr = err
					time.Sleep(time.Until(next))
				}
				break
			}
			resp, ok := parse(buf[:n], branch, callID)
			if ok && resp.Status >= 200 {
				return resp, nil
			}
		}
	}
	return Response{}, fmt.Errorf("no final response: %w", lastErr)
}

func optionsRequest(local *net.UDPAddr, target, branch, callID string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "OPTIONS sip:%s SIP/2.0\r\n", target)
	fmt.Fprintf(&b, "Via: SIP/2.0/UDP %s;branch=%s;rport\r\n", local, branch)
	fmt.Fprintf(&b, "Max-Forwards: 70\r\n")
	fmt.Fprintf(&b, "From: <sip:sipping@%s>;tag=%s\r\n", local, token())
	fmt.Fprintf(&b, "To: <sip:%s>\r\n", target)
	fmt.Fprintf(&b, "Call-ID: %s\r\n", callID)
	fmt.Fprintf(&b, "CSeq: 1 OPTIONS\r\n")
	fmt.Fprintf(&b, "Contact: <sip:sipping@%s>\r\n", local)
	fmt.Fprintf(&b, "Accept: application/sdp\r\n")
	fmt.Fprintf(&b, "User-Agent: sipping\r\n")
	fmt.Fprintf(&b, "Content-Length: 0\r\n\r\n")
	return []byte(b.String())
}

// parse reads a SIP response and reports whether it answers the request with this
// Via branch and Call-ID.
func parse(msg []byte, branch, callID string) (Response, bool) {
	head, _, _ := strings.Cut(string(msg), "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	proto, rest, _ := strings.Cut(lines[0], " ")
	code, reason, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if proto != "SIP/2.0" || err != nil || status < 100 || status > 699 {
		return Response{}, false
	}
	resp := Response{Status: status, Reason: reason}
	var viaOK, callOK bool
	for _, line := range lines[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "via", "v":
			viaOK = viaOK || strings.Contains(value, "branch="+branch)
		case "call-id", "i":
			callOK = callOK || value == callID
		case "server":
			resp.Server = value
		}
	}
	return resp, viaOK && callOK
}

func token() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
