package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/prompts"
	"pbx/rtpcore"
	"pbx/sipcore/siptest"
)

// promptSet is the embedded prompt set the PBX plays.
func promptSet(t testing.TB) *prompts.Set {
	t.Helper()
	s, err := prompts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// promptProbe is a stretch of prompt name as a phone hears it in codec pt:
// 40 ms from the loudest part of the prompt, through the codec, as bytes.
func promptProbe(t testing.TB, set *prompts.Set, name string, pt uint8) []byte {
	t.Helper()
	pcm := set.Get(name)
	const n = 320
	if len(pcm) < n {
		t.Fatalf("prompt %s: %d samples", name, len(pcm))
	}
	best, at := -1, 0
	for i := 0; i+n <= len(pcm); i += 80 {
		e := 0
		for _, s := range pcm[i : i+n] {
			e += int(s) * int(s) / 64
		}
		if e > best {
			best, at = e, i
		}
	}
	enc, ok := rtpcore.Encode(pt, nil, pcm[at:at+n])
	if !ok {
		t.Fatalf("codec %d", pt)
	}
	dec, _ := rtpcore.Decode(pt, nil, enc)
	return pcmBytes(dec)
}

func pcmBytes(pcm []int16) []byte {
	b := make([]byte, 2*len(pcm))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	return b
}

// heardAudio is the audio a phone received so far, decoded (events and
// other payload types left out).
func heardAudio(m *siptest.Media) []byte {
	var pcm []int16
	for _, p := range m.Received() {
		if p.PayloadType == 0 || p.PayloadType == 8 {
			pcm, _ = rtpcore.Decode(p.PayloadType, pcm, p.Payload)
		}
	}
	return pcmBytes(pcm)
}

// timesHeard counts the times probe occurs, sample aligned, in audio.
func timesHeard(audio, probe []byte) int {
	n := 0
	for from := 0; ; {
		i := bytes.Index(audio[from:], probe)
		if i < 0 {
			return n
		}
		if (from+i)%2 == 0 {
			n++
			from += i + len(probe)
		} else {
			from += i + 1
		}
	}
}

// waitPrompt polls until the phone has heard prompt name (in the codec of
// its first received packet) times times.
func waitPrompt(t *testing.T, set *prompts.Set, m *siptest.Media, name string, times int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := m.WaitReceived(ctx, 1)
	if err != nil {
		t.Fatalf("waiting for %s: %v", name, err)
	}
	probe := promptProbe(t, set, name, got[0].PayloadType)
	for {
		if timesHeard(heardAudio(m), probe) >= times {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the phone heard %s %d times, want %d", name, timesHeard(heardAudio(m), probe), times)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pressKeys sends keys ("0"-"9", "*", "#") as RFC 4733 events (payload
// type 101), one every 150 ms.
func pressKeys(t *testing.T, m *siptest.Media, keys string) {
	t.Helper()
	for _, k := range keys {
		ev := byte(strings.IndexRune("0123456789*#", k))
		pkt := func(end bool, dur uint16) []byte {
			b := []byte{ev, 10, byte(dur >> 8), byte(dur)}
			if end {
				b[1] |= 0x80
			}
			return b
		}
		if err := m.SendEvent(101, pkt(false, 160), pkt(false, 320), pkt(true, 800), pkt(true, 800), pkt(true, 800)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond) // the pace of a person pressing keys
	}
}

// answeredCall dials target from phone and waits for the PBX's 200.
func answeredCall(t *testing.T, ctx context.Context, phone *siptest.Phone, target string) *siptest.Call {
	t.Helper()
	call := phone.Dial(ctx, target)
	select {
	case <-call.Done():
	case <-ctx.Done():
		t.Fatalf("%s: no answer", target)
	}
	if st, err := call.Final(); st != 200 {
		t.Fatalf("%s answered %d %v", target, st, err)
	}
	return call
}

// waitPBXHangup waits for the PBX to end call with a BYE.
func waitPBXHangup(t *testing.T, ctx context.Context, call *siptest.Call, what string) {
	t.Helper()
	select {
	case <-call.Ended():
	case <-ctx.Done():
		t.Fatalf("%s: the PBX did not hang up", what)
	}
	if !call.RemoteHangup() {
		t.Fatalf("%s: the call ended from the phone's side, want the PBX's BYE", what)
	}
}

// TestVoicemailOtherMailboxPIN: alice dials *98, enters bob's mailbox
// number and PIN with RFC 4733 keys, hears "you have 1 new messages", and
// leaves with # (the PBX says goodbye and hangs up). Then three wrong PINs:
// the PBX hangs up and the guard counts one authentication failure, for
// alice's source, which (authFailures: 1) bans it.
func TestVoicemailOtherMailboxPIN(t *testing.T) {
	cfg := voicemailConfig(t)
	cfg.Demo = "  mailboxes:\n    - extension: \"101\"\n      pin: \"4321\"\n"
	cfg.Security = "  security:\n    enabled: true\n    trustLoopback: false\n    authFailures: 1\n    authWindow: 10m\n    banDuration: 10m\n"
	p := startPBX(t, cfg)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort), token: vmToken}
	guard := apiClient{t: t, base: c.base, token: testToken}
	set := promptSet(t)

	leaveMessage(t, p, 6000)
	waitMessages(t, p, c, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pbx := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p.sipPort))
	alice := siptest.NewPhone(t, siptest.Options{Username: "alice", Password: "alice-secret", Domain: "127.0.0.1", PBX: pbx})

	// 1. The right PIN: the count, then goodbye.
	call := answeredCall(t, ctx, alice, "*98")
	m := call.Media()
	waitPrompt(t, set, m, "vm-enter-mailbox", 1)
	pressKeys(t, m, "101#")
	waitPrompt(t, set, m, "vm-enter-pin", 1)
	pressKeys(t, m, "4321#")
	waitPrompt(t, set, m, "vm-you-have", 1)
	waitPrompt(t, set, m, "1", 1)
	waitPrompt(t, set, m, "vm-new", 1)
	pressKeys(t, m, "#")
	waitPrompt(t, set, m, "vm-goodbye", 1)
	waitPBXHangup(t, ctx, call, "*98 with the right PIN")
	if n := timesHeard(heardAudio(m), promptProbe(t, set, "vm-wrong-pin", m.Received()[0].PayloadType)); n != 0 {
		t.Errorf("the right PIN was refused %d times", n)
	}
	var before guardCounters
	guard.getJSON("/v1/security/counters", &before)
	if before.AuthFailures != 0 {
		t.Fatalf("counters %+v before any wrong PIN", before)
	}

	// 2. Three wrong PINs: the PBX hangs up and charges alice's source.
	call = answeredCall(t, ctx, alice, "*98")
	m = call.Media()
	for try := 1; try <= 3; try++ {
		waitPrompt(t, set, m, "vm-enter-mailbox", try)
		pressKeys(t, m, "101#")
		waitPrompt(t, set, m, "vm-enter-pin", try)
		pressKeys(t, m, fmt.Sprintf("000%d#", try))
		if try < 3 {
			waitPrompt(t, set, m, "vm-wrong-pin", try)
		}
	}
	waitPBXHangup(t, ctx, call, "*98 with three wrong PINs")
	var after guardCounters
	guard.getJSON("/v1/security/counters", &after)
	if after.AuthFailures != 1 {
		t.Errorf("counters %+v, want exactly one authentication failure for three wrong PINs", after)
	}
	var bans banList
	guard.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 1 || bans.Bans[0].IP != "127.0.0.1" {
		t.Errorf("bans %+v, want alice's source 127.0.0.1 (authFailures: 1)", bans)
	}
	if !p.log.Contains("voicemail: three failed logins") {
		t.Error("no log line for the three failed logins")
	}
}

// TestVoicemailFullMailbox: bob's mailbox holds one message
// (maxMessages: 1); a second caller hears vm-full, no greeting, and is
// hung up on; nothing more is stored, on disk or in the API.
func TestVoicemailFullMailbox(t *testing.T) {
	cfg := voicemailConfig(t)
	cfg.Demo = "  mailboxes:\n    - extension: \"101\"\n      maxMessages: 1\n"
	p := startPBX(t, cfg)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort), token: vmToken}
	set := promptSet(t)

	leaveMessage(t, p, 6000)
	first := waitMessages(t, p, c, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pbx := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p.sipPort))
	carol := siptest.NewPhone(t, siptest.Options{Username: "carol", Password: "carol-secret", Domain: "127.0.0.1", PBX: pbx})
	call := answeredCall(t, ctx, carol, "101")
	m := call.Media()
	// Carol speaks all along: a mailbox that took anything would keep it.
	go func() {
		frame := bytes.Repeat([]byte{0x55}, 160)
		for {
			select {
			case <-call.Ended():
				return
			case <-time.After(20 * time.Millisecond):
				m.Send(frame)
			}
		}
	}()
	waitPrompt(t, set, m, "vm-full", 1)
	waitPBXHangup(t, ctx, call, "call to a full mailbox")
	if n := timesHeard(heardAudio(m), promptProbe(t, set, "vm-greeting", m.Received()[0].PayloadType)); n != 0 {
		t.Errorf("the full mailbox played its greeting %d times", n)
	}
	ms := vmMessages(c)
	if len(ms) != 1 || ms[0].ID != first[0].ID {
		t.Fatalf("messages %+v, want only %s", ms, first[0].ID)
	}
	ents, err := os.ReadDir(filepath.Join(p.dataDir, "demo", "voicemail", "101"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), first[0].ID) {
			names = append(names, e.Name())
		}
	}
	if len(names) != 0 {
		t.Errorf("files besides the first message in the mailbox: %v", names)
	}
}
