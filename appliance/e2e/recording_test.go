package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"pbx/rtpcore"
)

const recToken = "e2e-recordings-token-0123456789abcdef"

// packetPCM is the little-endian PCM of packet i of a capture, as a
// stereo WAV's channel would hold it once deinterleaved (rtpcore's A-law
// tables are checked against the ITU-T reference in its own tests).
func packetPCM(i int, payload func(i, j int) byte) []byte {
	var b []byte
	for j := 12; j < 12+160; j++ {
		b = binary.LittleEndian.AppendUint16(b, uint16(rtpcore.AlawDecode(payload(i, j))))
	}
	return b
}

// channels splits a canonical stereo 16-bit WAV into its channels' bytes.
func channels(t *testing.T, wav []byte) (left, right []byte) {
	t.Helper()
	le := binary.LittleEndian
	if len(wav) < 44 || string(wav[0:4]) != "RIFF" || string(wav[8:12]) != "WAVE" {
		t.Fatalf("not a WAV: %d bytes", len(wav))
	}
	if ch, rate, bits := le.Uint16(wav[22:]), le.Uint32(wav[24:]), le.Uint16(wav[34:]); ch != 2 || rate != 8000 || bits != 16 {
		t.Fatalf("format: %d channels, %d Hz, %d bits", ch, rate, bits)
	}
	if data := le.Uint32(wav[40:]); int(data) != len(wav)-44 {
		t.Fatalf("data size %d in a file of %d bytes", data, len(wav))
	}
	for i := 44; i+4 <= len(wav); i += 4 {
		left = append(left, wav[i:i+2]...)
		right = append(right, wav[i+2:i+4]...)
	}
	return left, right
}

// found counts the packets of a capture whose audio appears in ch.
func found(ch []byte, n int, payload func(i, j int) byte) int {
	c := 0
	for i := 0; i < n; i++ {
		if bytes.Contains(ch, packetPCM(i, payload)) {
			c++
		}
	}
	return c
}

// TestRecordingOfACallThroughThePBX: alice (SIPp) calls bob (SIPp) through
// bin/pbx with recording on for every call; each side plays its own known
// PCMA capture. The recording is a stereo WAV whose left channel holds
// alice's audio and the right bob's, never the other's; its sidecar is
// complete; the API lists it and serves the same bytes.
func TestRecordingOfACallThroughThePBX(t *testing.T) {
	api := freePort(t)
	p := startPBX(t, pbxConfig{
		APIPort:   api,
		Recording: "  recording:\n    enabled: true\n    mode: internal\n",
		Tokens:    "      - name: rec\n        token: " + recToken + "\n        scopes: [recordings:read]\n",
	})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	callerAudio := func(i, j int) byte { return byte(0xd5 ^ (i*7 + j)) } // writeRTPCapture's audio.pcap
	calleeAudio := func(i, j int) byte { return byte(0x55 ^ (i*11 + j*3)) }
	if err := writeRTPCaptureOf(filepath.Join(dir, "callee.pcap"), 150, 0xca11ee, calleeAudio); err != nil {
		t.Fatal(err)
	}
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer_play.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "3800", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}

	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", api), token: recToken}
	var list struct {
		Recordings []struct {
			ID, Tenant, From, To, Direction string
			AnsweredBy                      string `json:"answered_by"`
			Bytes                           int64
			SHA256                          string
			DurationMS                      int64 `json:"duration_ms"`
			Incomplete                      bool
			Format                          map[string]any
		} `json:"recordings"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(list.Recordings) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recording listed; log:\n%s", tail(withoutDebug(p.log.String()), 30))
		}
		time.Sleep(50 * time.Millisecond)
		c.getJSON("/v1/recordings", &list)
	}
	if len(list.Recordings) != 1 {
		t.Fatalf("%d recordings, want 1", len(list.Recordings))
	}
	sc := list.Recordings[0]
	if sc.Tenant != "demo" || sc.From != "100" || sc.AnsweredBy != "101" || sc.Direction != "internal" || sc.Incomplete ||
		sc.Format["layout"] != "caller-left,far-right" || sc.Format["source_codec"] != "pcma" {
		t.Errorf("sidecar %+v", sc)
	}
	if sc.DurationMS < 3000 || sc.DurationMS > 6000 {
		t.Errorf("duration_ms %d, want about 3800", sc.DurationMS)
	}
	code, wav := c.do("GET", "/v1/recordings/demo/"+sc.ID+"/audio")
	if code != 200 {
		t.Fatalf("audio: %d", code)
	}
	sum := sha256.Sum256(wav)
	if int64(len(wav)) != sc.Bytes || hex.EncodeToString(sum[:]) != sc.SHA256 {
		t.Errorf("audio of %d bytes, sidecar says %d bytes, sha256 %s", len(wav), sc.Bytes, sc.SHA256)
	}
	start, _ := time.Parse("20060102T150405.000Z", sc.ID[:20])
	local := start.Local()
	onDisk, err := os.ReadFile(filepath.Join(p.dataDir, "recordings", local.Format("2006/01/02"), sc.ID+".wav"))
	if err != nil || !bytes.Equal(onDisk, wav) {
		t.Errorf("the file on disk differs from what the API served: %v", err)
	}
	left, right := channels(t, wav)
	callerLeft, callerRight := found(left, 150, callerAudio), found(right, 150, callerAudio)
	calleeLeft, calleeRight := found(left, 150, calleeAudio), found(right, 150, calleeAudio)
	t.Logf("caller's packets: %d left, %d right; callee's: %d left, %d right", callerLeft, callerRight, calleeLeft, calleeRight)
	if callerLeft < 140 || calleeRight < 140 || callerRight != 0 || calleeLeft != 0 {
		t.Errorf("channels: caller's audio %d/150 packets left and %d right, callee's %d left and %d/150 right", callerLeft, callerRight, calleeLeft, calleeRight)
	}
	if ents, _ := os.ReadDir(filepath.Join(p.dataDir, "recordings", "inflight")); len(ents) != 0 {
		t.Errorf("recordings/inflight not empty after the call")
	}
	// The call record says why: a record step before the dial.
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("%d call records", len(recs))
	}
	steps, _ := recs[0]["steps"].([]any)
	var types []string
	var result string
	for _, st := range steps {
		m, _ := st.(map[string]any)
		types = append(types, fmt.Sprint(m["type"]))
		if m["type"] == "record" {
			result = fmt.Sprint(m["result"])
		}
	}
	if fmt.Sprint(types) != "[record dial]" || result != "armed by system mode internal" {
		t.Errorf("steps %v, record step %q", types, result)
	}
}

// TestRecordingSurvivesSIGKILL: bin/pbx is killed mid-call while both
// sides play their captures; after a restart the in-flight WAV is in its
// day directory with a repaired header and a sidecar saying incomplete,
// and what was written before the kill is there, each side in its channel.
func TestRecordingSurvivesSIGKILL(t *testing.T) {
	api := freePort(t)
	p := startPBX(t, pbxConfig{
		APIPort:   api,
		Recording: "  recording:\n    enabled: true\n    mode: all\n",
		Tokens:    "      - name: rec\n        token: " + recToken + "\n        scopes: [recordings:read]\n",
	})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	callerAudio := func(i, j int) byte { return byte(0xd5 ^ (i*7 + j)) }
	calleeAudio := func(i, j int) byte { return byte(0x55 ^ (i*11 + j*3)) }
	if err := writeRTPCaptureOf(filepath.Join(dir, "callee.pcap"), 150, 0xca11ee, calleeAudio); err != nil {
		t.Fatal(err)
	}
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer_play.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "30000", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))

	// Kill once 2.5 s of audio reached the file.
	inflight := filepath.Join(p.dataDir, "recordings", "inflight")
	deadline := time.Now().Add(20 * time.Second)
	var id string
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no in-flight recording grew to 2.5 s; log:\n%s", tail(withoutDebug(p.log.String()), 30))
		}
		ents, _ := os.ReadDir(inflight)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && filepath.Ext(e.Name()) == ".wav" && fi.Size() > 44+32000*5/2 {
				id = e.Name()[:len(e.Name())-4]
			}
		}
		if id != "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	p.start()
	p.waitLog("recording recovery", 5*time.Second)

	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", api), token: recToken}
	var sc struct {
		ID         string
		Incomplete bool
		Bytes      int64
		From       string
		DurationMS int64 `json:"duration_ms"`
	}
	c.getJSON("/v1/recordings/demo/"+id, &sc)
	if !sc.Incomplete || sc.From != "100" || sc.DurationMS < 2500 {
		t.Errorf("recovered sidecar %+v", sc)
	}
	code, wav := c.do("GET", "/v1/recordings/demo/"+id+"/audio")
	if code != 200 || int64(len(wav)) != sc.Bytes {
		t.Fatalf("audio: %d, %d bytes (sidecar %d)", code, len(wav), sc.Bytes)
	}
	left, right := channels(t, wav)
	callerLeft, callerRight := found(left, 150, callerAudio), found(right, 150, callerAudio)
	calleeLeft, calleeRight := found(left, 150, calleeAudio), found(right, 150, calleeAudio)
	t.Logf("recovered: caller's packets %d left, %d right; callee's %d left, %d right", callerLeft, callerRight, calleeLeft, calleeRight)
	if callerLeft < 100 || calleeRight < 100 || callerRight != 0 || calleeLeft != 0 {
		t.Errorf("recovered channels: caller's audio %d left and %d right, callee's %d left and %d right", callerLeft, callerRight, calleeLeft, calleeRight)
	}
	if ents, _ := os.ReadDir(inflight); len(ents) != 0 {
		t.Errorf("recordings/inflight not empty after recovery: %d entries", len(ents))
	}
}
