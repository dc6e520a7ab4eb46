package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// responder answers every request on a real loopback socket with the responses
// answer builds from it, after an optional number of requests it ignores.
func responder(t *testing.T, ignore int, answer func(req string) []string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if ignore > 0 {
				ignore--
				continue
			}
			for _, r := range answer(string(buf[:n])) {
				if _, err := pc.WriteTo([]byte(r), from); err != nil {
					return
				}
			}
		}
	}()
	return pc.LocalAddr().String()
}

// reply echoes the transaction headers of req into a response with this status line.
func reply(req, status string, extra ...string) string {
	var b strings.Builder
	b.WriteString("SIP/2.0 " + status + "\r\n")
	for _, line := range strings.Split(req, "\r\n") {
		for _, h := range []string{"Via:", "From:", "To:", "Call-ID:", "CSeq:"} {
			if strings.HasPrefix(line, h) {
				b.WriteString(line + "\r\n")
			}
		}
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return b.String()
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		ignore   int
		answer   func(req string) []string
		want     int
		wantText string
	}{
		{
			name:     "200",
			answer:   func(r string) []string { return []string{reply(r, "200 OK", "Server: pbx")} },
			want:     0,
			wantText: "200 OK (Server: pbx)",
		},
		{
			name:     "first request lost, 200 on resend",
			ignore:   1,
			answer:   func(r string) []string { return []string{reply(r, "200 OK")} },
			want:     0,
			wantText: "200 OK",
		},
		{
			name: "provisional and stray responses skipped",
			answer: func(r string) []string {
				stray := strings.Replace(reply(r, "503 Elsewhere"), "Call-ID: ", "Call-ID: other-", 1)
				return []string{reply(r, "100 Trying"), stray, "garbage", reply(r, "200 OK")}
			},
			want:     0,
			wantText: "200 OK",
		},
		{
			name:     "404",
			answer:   func(r string) []string { return []string{reply(r, "404 Not Found")} },
			want:     1,
			wantText: "404 Not Found",
		},
		{
			name:   "silence",
			answer: func(string) []string { return nil },
			want:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := responder(t, tt.ignore, tt.answer)
			var out, errOut bytes.Buffer
			got := run([]string{"-timeout", "1s", "-interval", "100ms", addr}, &out, &errOut)
			if got != tt.want {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", got, tt.want, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tt.wantText) {
				t.Fatalf("stdout %q, want %q", out.String(), tt.wantText)
			}
		})
	}
}

func TestNothingListening(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := Options(ctx, addr, 100*time.Millisecond); err == nil {
		t.Fatal("want an error when nothing listens")
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 2*time.Second {
		t.Fatalf("gave up after %v, want about the 600ms timeout", d)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"a", "b"}, {"-timeout", "0s", "x:1"}, {"-bogus"}} {
		var out, errOut bytes.Buffer
		if got := run(args, &out, &errOut); got != 2 {
			t.Errorf("args %q: exit %d, want 2", args, got)
		}
	}
}
