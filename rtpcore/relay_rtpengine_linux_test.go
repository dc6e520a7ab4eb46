package rtpcore

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"
)

// rtpEngineRelay is rtpengine as make bench-compare runs it (userspace,
// packaging/bench/rtpengine.conf.tmpl), realtime when the Engine's
// priority is, each pair of phones a call offered and answered over its
// ng protocol.
type rtpEngineRelay struct {
	cmd *exec.Cmd
}

func (*rtpEngineRelay) name() string { return "rtpengine" }

func (r *rtpEngineRelay) close() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// cpu is rtpengine's CPU so far, all its threads, from /proc.
func (r *rtpEngineRelay) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command's parenthesis: state is the first,
	// utime the 12th and stime the 13th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// switches is the context switches of all rtpengine's threads so far.
func (r *rtpEngineRelay) switches() int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", r.cmd.Process.Pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// startRTPEngine starts rtpengine on procRelayIP and makes each pair of
// phones a call through it.
func startRTPEngine(b *testing.B, phones []int) (procRelay, []int) {
	bin, err := exec.LookPath("rtpengine")
	if err != nil {
		b.Fatal("rtpengine is not installed (apt-get install rtpengine-daemon, or run make bench-compare once)")
	}
	dir := b.TempDir()
	tmpl, err := template.ParseFiles(filepath.Join("..", "packaging", "bench", "rtpengine.conf.tmpl"))
	if err != nil {
		b.Fatal(err)
	}
	ng := freeLocalPort(b, "udp")
	conf := struct {
		IP                              string
		NGPort, CLIPort, RTPMin, RTPMax int
		Realtime                        bool
	}{procRelayIP.String(), ng, freeLocalPort(b, "tcp"), 20000, 39999, procRelayPriority == PriorityRealtime}
	var cfg bytes.Buffer
	if err := tmpl.Execute(&cfg, conf); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "rtpengine.conf")
	if err := os.WriteFile(path, cfg.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "rtpengine.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	r := &rtpEngineRelay{cmd: exec.Command(bin, "--config-file="+path)}
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ok := false
	defer func() {
		if !ok {
			r.close()
			out, _ := os.ReadFile(log.Name())
			b.Logf("rtpengine's log:\n%s", out)
		}
	}()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(procRelayIP, uint16(ng))))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctl := &ngClient{c: c}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := ctl.call(map[string]any{"command": "ping"}); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("rtpengine did not answer its ng ping: %v", err)
		}
	}
	ports := make([]int, len(phones))
	for i := 0; i+1 < len(phones); i += 2 {
		id := "call-" + strconv.Itoa(i/2)
		offer := map[string]any{"command": "offer", "call-id": id, "from-tag": "a", "sdp": phoneSDP(phones[i])}
		// The port the offer's reply gives is the one the answerer (phone
		// i+1) sends to, and the answer's the offerer's.
		if ports[i+1], err = ctl.mediaPort(offer); err != nil {
			b.Fatalf("offer %s: %v", id, err)
		}
		answer := map[string]any{"command": "answer", "call-id": id, "from-tag": "a", "to-tag": "b", "sdp": phoneSDP(phones[i+1])}
		if ports[i], err = ctl.mediaPort(answer); err != nil {
			b.Fatalf("answer %s: %v", id, err)
		}
	}
	ok = true
	return r, ports
}

// phoneSDP is a benchmark phone's offer or answer: PCMA on port.
func phoneSDP(port int) string {
	ip := procPhoneIP.String()
	return "v=0\r\no=- 1 1 IN IP4 " + ip + "\r\ns=-\r\nc=IN IP4 " + ip + "\r\nt=0 0\r\nm=audio " +
		strconv.Itoa(port) + " RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\na=sendrecv\r\n"
}

// freeLocalPort is a port on procRelayIP that nothing used a moment ago.
func freeLocalPort(b *testing.B, network string) int {
	addr := net.JoinHostPort(procRelayIP.String(), "0")
	if network == "udp" {
		c, err := net.ListenPacket(network, addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ngClient speaks rtpengine's ng control protocol: a cookie, a space and a
// bencoded dictionary each way, over UDP.
type ngClient struct {
	c   *net.UDPConn
	seq int
}

// call sends msg and returns the reply's dictionary; a reply whose result
// is not "ok" (or "pong") is an error.
func (n *ngClient) call(msg map[string]any) (map[string]any, error) {
	n.seq++
	cookie := strconv.Itoa(n.seq)
	var out bytes.Buffer
	out.WriteString(cookie + " ")
	bencode(&out, msg)
	if _, err := n.c.Write(out.Bytes()); err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	for {
		_ = n.c.SetReadDeadline(time.Now().Add(time.Second))
		got, err := n.c.Read(buf)
		if err != nil {
			return nil, err
		}
		c, body, ok := strings.Cut(string(buf[:got]), " ")
		if !ok || c != cookie {
			continue // a late reply to an earlier attempt
		}
		v, rest, err := bdecode(body)
		if err != nil || rest != "" {
			return nil, fmt.Errorf("ng reply %q: %v", body, err)
		}
		d, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("ng reply %q is not a dictionary", body)
		}
		if res := d["result"]; res != "ok" && res != "pong" {
			return nil, fmt.Errorf("ng %v: %v %v", msg["command"], res, d["error-reason"])
		}
		return d, nil
	}
}

// mediaPort sends an offer or answer and returns the audio port of the SDP
// rtpengine gives back.
func (n *ngClient) mediaPort(msg map[string]any) (int, error) {
	d, err := n.call(msg)
	if err != nil {
		return 0, err
	}
	sdp, _ := d["sdp"].(string)
	for _, l := range strings.Split(sdp, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "m=audio" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no audio in the SDP %q", sdp)
}

// bencode writes v, a string, an int or a dictionary of them (its keys
// sorted, as bencoding requires).
func bencode(w *bytes.Buffer, v any) {
	switch v := v.(type) {
	case string:
		fmt.Fprintf(w, "%d:%s", len(v), v)
	case int:
		fmt.Fprintf(w, "i%de", v)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.WriteByte('d')
		for _, k := range keys {
			bencode(w, k)
			bencode(w, v[k])
		}
		w.WriteByte('e')
	default:
		panic(fmt.Sprintf("bencode: %T", v))
	}
}

// bdecode reads one bencoded value from s: a string, an int64, a []any or
// a map[string]any. It returns what follows it.
func bdecode(s string) (any, string, error) {
	if s == "" {
		return nil, s, errors.New("bencode: short")
	}
	switch s[0] {
	case 'i':
		end := strings.IndexByte(s, 'e')
		if end < 0 {
			return nil, s, errors.New("bencode: unterminated integer")
		}
		n, err := strconv.ParseInt(s[1:end], 10, 64)
		return n, s[end+1:], err
	case 'l', 'd':
		var list []any
		rest := s[1:]
		for rest != "" && rest[0] != 'e' {
			var v any
			var err error
			if v, rest, err = bdecode(rest); err != nil {
				return nil, s, err
			}
			list = append(list, v)
		}
		if rest == "" {
			return nil, s, errors.New("bencode: unterminated list")
		}
		if s[0] == 'l' {
			return list, rest[1:], nil
		}
		if len(list)%2 != 0 {
			return nil, s, errors.New("bencode: dictionary with a key and no value")
		}
		d := make(map[string]any, len(list)/2)
		for i := 0; i < len(list); i += 2 {
			k, ok := list[i].(string)
			if !ok {
				return nil, s, errors.New("bencode: dictionary key not a string")
			}
			d[k] = list[i+1]
		}
		return d, rest[1:], nil
	}
	colon := strings.IndexByte(s, ':')
	if colon < 0 {
		return nil, s, errors.New("bencode: bad string")
	}
	n, err := strconv.Atoi(s[:colon])
	if err != nil || n < 0 || colon+1+n > len(s) {
		return nil, s, errors.New("bencode: bad string length")
	}
	return s[colon+1 : colon+1+n], s[colon+1+n:], nil
}

// TestBencodeNg checks the ng client's bencoding against the shapes of
// rtpengine's messages and replies.
func TestBencodeNg(t *testing.T) {
	var w bytes.Buffer
	bencode(&w, map[string]any{"sdp": "v=0", "command": "offer", "n": 7})
	if got, want := w.String(), "d7:command5:offer1:ni7e3:sdp3:v=0e"; got != want {
		t.Fatalf("bencode: %q, want %q (keys sorted)", got, want)
	}
	v, rest, err := bdecode("d6:result2:ok3:sdp12:m=audio 20005:flagsl1:a1:be4:sizei-3ee tail")
	if err != nil || rest != " tail" {
		t.Fatalf("bdecode: %v, rest %q", err, rest)
	}
	d := v.(map[string]any)
	if d["result"] != "ok" || d["sdp"] != "m=audio 2000" || d["size"] != int64(-3) || len(d["flags"].([]any)) != 2 {
		t.Fatalf("bdecode: %#v", d)
	}
	for _, bad := range []string{"", "d3:abc", "5:ab", "i12", "di1e1:ae", "l1:a"} {
		if _, _, err := bdecode(bad); err == nil {
			t.Errorf("bdecode(%q): no error", bad)
		}
	}
}
