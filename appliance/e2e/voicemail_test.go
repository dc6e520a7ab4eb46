package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"pbx/rtpcore"
)

// vmToken reads and deletes voicemail and reads call records.
const vmToken = "e2e-voicemail-token-0123456789abcdef"

// voicemailConfig turns voicemail and message waiting on with a mailbox
// for bob (101).
func voicemailConfig(t *testing.T) pbxConfig {
	return pbxConfig{
		APIPort:   freePort(t),
		APIRate:   6000,
		Recording: "  voicemail:\n    enabled: true\n    mwi: true\n",
		Demo:      "  mailboxes:\n    - extension: \"101\"\n",
		Tokens:    "      - name: vm\n        token: " + vmToken + "\n        scopes: [voicemail:read, voicemail:delete, cdr:read]\n",
	}
}

// vmPayload is the PCMA byte j of packet i of the caller's audio: every
// 20 ms frame of the first 512 differs from every other (a frame's first
// byte tells i mod 256, its slope in j tells i/256), and none is silence.
func vmPayload(i, j int) byte { return byte((i*37+j*(5+2*(i>>8)))&0xff) ^ 0x55 }

// digitAt is an RFC 4733 digit in a capture: sent as telephone-event
// packets (payload type 101) starting at packet index At, for 160 ms.
type digitAt struct {
	At    int
	Digit byte // 0-9, 10 for *, 11 for #
}

// writeCaptureWithDigits writes a pcap of n 20 ms packets of stream ssrc
// for SIPp's play_pcap_audio (which rewrites the addresses to the
// negotiated ones): PCMA audio from payload, except where a digit
// is sent (eight event packets sharing the event's timestamp, the last
// three with the end bit, as RFC 4733 section 2.5.1.4 sends them).
func writeCaptureWithDigits(path string, n int, ssrc uint32, payload func(i, j int) byte, digits []digitAt) error {
	var b bytes.Buffer
	le := binary.LittleEndian
	hdr := make([]byte, 24)
	le.PutUint32(hdr[0:], 0xa1b2c3d4)
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], 65535)
	le.PutUint32(hdr[20:], 1)
	b.Write(hdr)
	event := map[int]digitAt{}
	for _, d := range digits {
		for k := 0; k < 8; k++ {
			event[d.At+k] = d
		}
	}
	for i := 0; i < n; i++ {
		var rtp []byte
		if d, ok := event[i]; ok {
			k := i - d.At
			rtp = make([]byte, 12+4)
			rtp[0], rtp[1] = 0x80, 101
			if k == 0 {
				rtp[1] |= 0x80
			}
			binary.BigEndian.PutUint32(rtp[4:], uint32(160*d.At))
			rtp[12] = d.Digit
			rtp[13] = 10 // volume
			if k >= 5 {
				rtp[13] |= 0x80 // end
			}
			binary.BigEndian.PutUint16(rtp[14:], uint16(160*min(k+1, 6)))
		} else {
			rtp = make([]byte, 12+160)
			rtp[0], rtp[1] = 0x80, 8
			if i == 0 {
				rtp[1] |= 0x80 // the stream's first packet
			}
			binary.BigEndian.PutUint32(rtp[4:], uint32(160*i))
			for j := 12; j < len(rtp); j++ {
				rtp[j] = payload(i, j)
			}
		}
		binary.BigEndian.PutUint16(rtp[2:], uint16(1000+i))
		binary.BigEndian.PutUint32(rtp[8:], ssrc)
		udp := make([]byte, 8, 8+len(rtp))
		binary.BigEndian.PutUint16(udp[0:], 6000)
		binary.BigEndian.PutUint16(udp[2:], 6002)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(rtp)))
		udp = append(udp, rtp...)
		ip := make([]byte, 20, 20+len(udp))
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		copy(ip[12:], []byte{127, 0, 0, 1})
		copy(ip[16:], []byte{127, 0, 0, 1})
		ip = append(ip, udp...)
		frame := append(make([]byte, 12), 0x08, 0x00)
		frame = append(frame, ip...)
		rec := make([]byte, 16)
		us := i * 20000
		le.PutUint32(rec[0:], uint32(us/1000000))
		le.PutUint32(rec[4:], uint32(us%1000000))
		le.PutUint32(rec[8:], uint32(len(frame)))
		le.PutUint32(rec[12:], uint32(len(frame)))
		b.Write(rec)
		b.Write(frame)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

type vmMessage struct {
	ID, Tenant, Extension, From, Folder string
	DurationMS                          int64 `json:"duration_ms"`
}

// vmMessages lists bob's messages through the API.
func vmMessages(c apiClient) []vmMessage {
	var list struct {
		Messages []vmMessage `json:"messages"`
	}
	c.getJSON("/v1/voicemail?tenant=demo&extension=101", &list)
	return list.Messages
}

// waitMessages polls the API until bob has n messages.
func waitMessages(t *testing.T, p *pbxProc, c apiClient, n int) []vmMessage {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ms := vmMessages(c)
		if len(ms) == n {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob has %d messages, want %d; log:\n%s", len(ms), n, tail(withoutDebug(p.log.String()), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leaveMessage has alice (100) call bob (101) for ms milliseconds, playing
// the vmPayload audio.
func leaveMessage(t *testing.T, p *pbxProc, ms int) {
	t.Helper()
	uac, dir := startMessage(t, p, ms)
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
}

// startMessage starts alice's call of leaveMessage and returns the SIPp run
// (wait for it) and its directory.
func startMessage(t *testing.T, p *pbxProc, ms int) (*sippRun, string) {
	t.Helper()
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	if err := writeCaptureWithDigits(filepath.Join(dir, "audio.pcap"), ms/20+50, 0xa11ce, vmPayload, nil); err != nil {
		t.Fatal(err)
	}
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", strconv.Itoa(ms), "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	return uac, dir
}

// checkMessageAudio: the message's audio is what alice sent after the
// greeting: its 20 ms frames are decoded frames of the caller's stream, in
// order (a frame lost on loopback or written as silence is tolerated, up
// to 5%).
func checkMessageAudio(t *testing.T, c apiClient, id string) {
	t.Helper()
	code, wav := c.do("GET", "/v1/voicemail/demo/101/"+id+"/audio")
	if code != 200 {
		t.Fatalf("audio: %d", code)
	}
	pcm, err := rtpcore.ReadWAV(bytes.NewReader(wav))
	if err != nil {
		t.Fatalf("message WAV: %v", err)
	}
	sent := map[string]int{}
	for i := 0; i < 512; i++ {
		payload := make([]byte, 160)
		for j := range payload {
			payload[j] = vmPayload(i, j+12)
		}
		frame, _ := rtpcore.Decode(8, nil, payload)
		sent[fmt.Sprint(frame)] = i
	}
	// The message starts at any sample; find the alignment that matches.
	best, order := 0, true
	for off := 0; off < 160 && best == 0; off++ {
		hits, last := 0, -1
		for k := off; k+160 <= len(pcm); k += 160 {
			if i, ok := sent[fmt.Sprint(pcm[k:k+160])]; ok {
				hits++
				if i <= last {
					order = false
				}
				last = i
			}
		}
		best = hits
	}
	frames := len(pcm) / 160
	if frames < 100 || best*100 < frames*95 || !order {
		t.Fatalf("message of %d frames: %d are the caller's frames (in order: %t), want at least 95%%", frames, best, order)
	}
}

// TestVoicemailDepositRetrieveAndLamp: with voicemail on and a mailbox for
// bob (101), alice's call to bob with no phone registered, then to bob's
// busy phone, each leave a message whose audio is what alice sent; bob's
// lamp subscription hears Messages-Waiting: yes; bob dials *97 (his own
// mailbox: no PIN), hears his messages and deletes both with 7, then #;
// the messages are gone from the disk and the API, the lamp goes out, and
// the call record of *97 keeps no digits.
func TestVoicemailDepositRetrieveAndLamp(t *testing.T) {
	cfg := voicemailConfig(t)
	p := startPBX(t, cfg)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort), token: vmToken}
	lamp, lampDir := mwiSubscriberAt(t, p, "127.0.0.1", "bob", "101", "no", "yes", freePort(t))

	// 1. No phone registered: straight to the mailbox.
	leaveMessage(t, p, 9000)
	ms := waitMessages(t, p, c, 1)
	if ms[0].From != "100" || ms[0].Folder != "new" || ms[0].DurationMS < 2000 {
		t.Errorf("message %+v", ms[0])
	}
	checkMessageAudio(t, c, ms[0].ID)
	if code := lamp.wait(); code != 0 {
		t.Fatalf("lamp: sipp exit %d\n%s", code, lamp.errors(lampDir))
	}

	// 2. Bob's phone is busy: the dial fails over to the mailbox.
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort),
		"-sf", "uas_486.xml", "-m", "1", "-p", strconv.Itoa(bobPort), "-i", "127.0.0.1")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	leaveMessage(t, p, 9000)
	if code := uas.wait(); code != 0 {
		t.Fatalf("busy phone: sipp exit %d\n%s", code, uas.errors(dir))
	}
	ms = waitMessages(t, p, c, 2)
	checkMessageAudio(t, c, ms[0].ID)
	var rec struct {
		Steps []struct{ Type, Result string }
	}
	c.getJSON("/v1/cdr/demo/"+ms[0].ID, &rec)
	if len(rec.Steps) < 2 || rec.Steps[0].Type != "dial" || rec.Steps[0].Result != "busy" || rec.Steps[len(rec.Steps)-1].Type != "voicemail" {
		t.Errorf("busy call's steps %+v, want a busy dial then voicemail", rec.Steps)
	}

	// 3. Bob checks his mailbox and deletes both messages.
	lamp, lampDir = mwiSubscriberAt(t, p, "127.0.0.1", "bob", "101", "yes", "no", freePort(t))
	check := scenarioDir(t, map[string]string{"bob.csv": credentials("bob")})
	// 1 plays (new, newest first), 7 deletes it and the next plays, 7
	// deletes that, # in the main menu says goodbye and the PBX hangs up.
	keys := []digitAt{{At: 75, Digit: 1}, {At: 200, Digit: 7}, {At: 475, Digit: 7}, {At: 675, Digit: 11}}
	if err := writeCaptureWithDigits(filepath.Join(check, "audio.pcap"), 1000, 0xb0b, func(int, int) byte { return 0xd5 }, keys); err != nil {
		t.Fatal(err)
	}
	uac := startSIPp(t, check, "check", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort),
		"-sf", "uac_hungup.xml", "-inf", "bob.csv", "-s", "*97", "-auth_uri", fmt.Sprintf("*97@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := uac.wait(); code != 0 {
		t.Fatalf("*97: sipp exit %d\n%s\nlog:\n%s", code, uac.errors(check), tail(withoutDebug(p.log.String()), 40))
	}
	waitMessages(t, p, c, 0)
	for _, m := range ms {
		if _, err := os.Stat(filepath.Join(p.dataDir, "demo", "voicemail", "101", m.ID+".wav")); !os.IsNotExist(err) {
			t.Errorf("message %s still on disk: %v", m.ID, err)
		}
		if code, _ := c.do("GET", "/v1/voicemail/demo/101/"+m.ID); code != 404 {
			t.Errorf("deleted message %s: %d, want 404", m.ID, code)
		}
	}
	if code := lamp.wait(); code != 0 {
		t.Fatalf("lamp after the deletions: sipp exit %d\n%s", code, lamp.errors(lampDir))
	}
	var list struct {
		Records []struct{ ID, To string } `json:"records"`
	}
	c.getJSON("/v1/cdr?tenant=demo", &list)
	for _, r := range list.Records {
		if r.To != "*97" {
			continue
		}
		var rec struct {
			Steps  []struct{ Type string }
			Digits []struct{ Digits string }
		}
		c.getJSON("/v1/cdr/demo/"+r.ID, &rec)
		if len(rec.Steps) == 0 || rec.Steps[0].Type != "voicemail_check" || len(rec.Digits) != 0 {
			t.Errorf("*97 record: steps %+v digits %+v, want voicemail_check and no digits", rec.Steps, rec.Digits)
		}
		return
	}
	t.Errorf("no call record for *97 among %+v", list.Records)
}
