package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tones each phone sends: the far end's recording must carry its peer's.
const (
	baresipTone   = 1000.0 // Hz, alice on baresip (extension 100)
	linphonecTone = 600.0  // Hz, bob on linphonec (extension 101)
)

// softphoneEnv is a PBX with alice registered from baresip and bob from
// linphonec.
type softphoneEnv struct {
	pbx   *pbxProc
	api   apiClient
	alice *baresip
	bob   *linphonec
	calls int // call records expected so far
}

// TestSoftphones drives two real softphone stacks nobody here wrote, stock
// Debian baresip and linphonec, against bin/pbx over UDP with no proxy in
// between: both register, call each other with audio checked at the far end
// (each plays a tone the other records), hold and resume, and send DTMF.
func TestSoftphones(t *testing.T) {
	requireSoftphone(t, "baresip", "baresip")
	requireSoftphone(t, "linphonec", "linphone-cli")
	ports := newSoftphonePorts(t)
	apiPort := freePort(t)
	e := &softphoneEnv{}
	e.pbx = startPBX(t, pbxConfig{RTPMin: ports.rtpMin, RTPMax: ports.rtpMax, APIPort: apiPort, LogLevel: "info"})
	e.api = apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := t.TempDir()
	toneA, toneB := filepath.Join(dir, "alice.wav"), filepath.Join(dir, "bob.wav")
	writeToneWAV(t, toneA, baresipTone, 30)
	writeToneWAV(t, toneB, linphonecTone, 30)
	e.alice = startBaresip(t, e.pbx, ports, "alice", toneA)
	e.bob = startLinphonec(t, e.pbx, ports, "bob", toneB)

	steps := []struct {
		name string
		run  func(*testing.T, *softphoneEnv)
	}{
		{"register", softphonesRegister},
		{"baresip_calls_linphonec", softphonesCallToLinphonec},
		{"linphonec_calls_baresip", softphonesCallToBaresip},
		{"hold_resume", softphonesHoldResume},
		{"dtmf", softphonesDTMF},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) {
			return // later scenarios build on this one
		}
	}
}

// softphonesRegister: both phones register with digest, and the PBX lists
// both bindings.
func softphonesRegister(t *testing.T, e *softphoneEnv) {
	e.alice.waitRegistered(t)
	e.bob.waitRegistered(t)
	api := apiClient{t: t, base: e.api.base, token: e.api.token}
	waitFor(t, "both registrations listed", stepTimeout, func() bool {
		var regs struct {
			Registrations []struct{ Extension, Username string } `json:"registrations"`
		}
		api.getJSON("/v1/registrations?tenant=demo&online=true", &regs)
		var got []string
		for _, r := range regs.Registrations {
			got = append(got, r.Username+"/"+r.Extension)
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"alice/100", "bob/101"})
	})
}

// softphonesCallToLinphonec: baresip calls 101, linphonec answers, each hears
// the other's tone, baresip hangs up, and the record names both ends.
func softphonesCallToLinphonec(t *testing.T, e *softphoneEnv) {
	heard := e.aliceCallsBob(t)
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.bob.wait(t, "ended")
	e.checkAudio(t, heard)
	e.checkRecord(t, "100", "101")
}

// softphonesCallToBaresip: the other way round; linphonec hangs up.
func softphonesCallToBaresip(t *testing.T, e *softphoneEnv) {
	e.alice.clearRecordings()
	heard := e.bob.recordNext(t)
	e.bob.mark()
	e.bob.command(t, "call sip:100@127.0.0.1")
	in := e.alice.waitEvent(t, "CALL_INCOMING")
	if peer := fmt.Sprint(in["peeruri"]); !strings.Contains(peer, "sip:101@") {
		t.Errorf("baresip sees the call from %s, want extension 101", peer)
	}
	e.alice.command(t, "accept", "")
	e.alice.waitEvent(t, "CALL_ESTABLISHED")
	e.bob.wait(t, "connected")
	e.waitAudio(t, heard, 1500*time.Millisecond)
	e.bob.mark()
	e.bob.command(t, "terminate")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.bob.wait(t, "ended")
	e.checkAudio(t, heard)
	e.checkRecord(t, "101", "100")
}

// softphonesHoldResume: baresip puts the call on hold and takes it back; the
// PBX answers both re-INVITEs itself (music on hold: silence here, no class
// is configured), so linphonec is never paused; the call survives and media
// flows both ways after the resume: linphonec hears baresip's tone,
// baresip's RTP receive count climbs. (baresip 1.0 drops its recording
// filter when hold restarts its player, so its side is checked by packet
// count.)
func softphonesHoldResume(t *testing.T, e *softphoneEnv) {
	heard := e.aliceCallsBob(t)
	e.bob.mark()
	e.alice.command(t, "hold", "")
	e.heldInAPI(t, true)
	e.alice.command(t, "resume", "")
	e.heldInAPI(t, false)
	if out := e.bob.proc.out.Since(); strings.Contains(out, "paused") {
		t.Errorf("linphonec was told of the hold:\n%s", out)
	}
	before := e.alice.rtpReceived(t)
	w, _ := readWAV(heard)
	at := w.seconds()
	waitFor(t, "media both ways after the resume", stepTimeout, func() bool {
		w, _ := readWAV(heard)
		return e.alice.rtpReceived(t) >= before+50 && w.seconds() >= at+1.5
	})
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.bob.wait(t, "ended")
	checkHeard(t, "linphonec", heard, baresipTone, linphonecTone, time.Second)
	e.checkRecord(t, "100", "101")
}

// softphonesDTMF: digits baresip sends (RFC 4733) reach linphonec through
// the PBX.
func softphonesDTMF(t *testing.T, e *softphoneEnv) {
	e.aliceCallsBob(t)
	e.bob.mark()
	for _, d := range "19#" {
		e.alice.command(t, "sndcode", string(d))
		e.bob.wait(t, fmt.Sprintf("Receiving tone %c", d))
	}
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.bob.wait(t, "ended")
	e.checkRecord(t, "100", "101")
}

// heldInAPI waits until /v1/calls lists one call, held or not as wanted.
func (e *softphoneEnv) heldInAPI(t *testing.T, want bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the call held=%v in /v1/calls", want), stepTimeout, func() bool {
		var calls struct {
			Calls []struct{ Held bool } `json:"calls"`
		}
		e.api.getJSON("/v1/calls", &calls)
		return len(calls.Calls) == 1 && calls.Calls[0].Held == want
	})
}

// aliceCallsBob sets up a call from baresip to linphonec with audio flowing
// both ways and returns the file linphonec records it to.
func (e *softphoneEnv) aliceCallsBob(t *testing.T) string {
	t.Helper()
	e.alice.clearRecordings()
	heard := e.bob.recordNext(t)
	e.bob.mark()
	e.alice.command(t, "dial", "sip:101@127.0.0.1")
	out := e.bob.wait(t, "Receiving new incoming call from")
	if !strings.Contains(out, "<sip:100@127.0.0.1>") || !strings.Contains(out, `"Alice"`) {
		t.Errorf("linphonec sees the call as:\n%s\nwant from \"Alice\" <sip:100@127.0.0.1>", out)
	}
	e.bob.mark()
	e.bob.command(t, "answer")
	e.alice.waitEvent(t, "CALL_ESTABLISHED")
	e.bob.wait(t, "connected")
	e.waitAudio(t, heard, 1500*time.Millisecond)
	return heard
}

// waitAudio waits until both phones recorded at least d of the call.
func (e *softphoneEnv) waitAudio(t *testing.T, bobHeard string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d + stepTimeout)
	for {
		a, errA := readWAV(e.alice.heard())
		b, errB := readWAV(bobHeard)
		if errA == nil && errB == nil && a.seconds() >= d.Seconds() && b.seconds() >= d.Seconds() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of audio not recorded at both phones: baresip %.1f s (%v), linphonec %.1f s (%v)", d, a.seconds(), errA, b.seconds(), errB)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkAudio checks that each phone heard the other's tone.
func (e *softphoneEnv) checkAudio(t *testing.T, bobHeard string) {
	t.Helper()
	checkHeard(t, "linphonec", bobHeard, baresipTone, linphonecTone, 0)
	checkHeard(t, "baresip", e.alice.heard(), linphonecTone, baresipTone, 0)
}

// checkHeard checks that the recording at path carries the tone want and
// not the phone's own tone other, in the whole call or (last > 0) in its
// final stretch.
func checkHeard(t *testing.T, who, path string, want, other float64, last time.Duration) {
	t.Helper()
	w, err := readWAV(path)
	if err != nil {
		t.Errorf("%s recording: %v", who, err)
		return
	}
	if last > 0 {
		w = w.last(last)
	}
	// A clean tone scores 0.5; codec noise, jitter-buffer gaps and the
	// call's first silent frames bring it down a little, silence or the
	// wrong tone to about 0.
	if got, wrong := w.toneShare(want), w.toneShare(other); got < 0.2 || wrong > 0.05 {
		t.Errorf("%s heard %.1f s with %.3f of the energy at %.0f Hz (want > 0.2) and %.3f at its own %.0f Hz (want < 0.05)",
			who, w.seconds(), got, want, wrong, other)
	}
}

// checkRecord waits for the next call record and checks its ends.
func (e *softphoneEnv) checkRecord(t *testing.T, from, to string) {
	t.Helper()
	e.calls++
	var recs []map[string]any
	waitFor(t, fmt.Sprintf("call record %d", e.calls), stepTimeout, func() bool {
		recs = callRecords(t, e.pbx.dataDir)
		return len(recs) >= e.calls
	})
	if len(recs) != e.calls {
		t.Fatalf("%d call records, want %d", len(recs), e.calls)
	}
	latest := recs[0]
	for _, r := range recs[1:] {
		if startOf(r).After(startOf(latest)) {
			latest = r
		}
	}
	// from is the calling extension, not its SIP username.
	if latest["from"] != from || latest["to"] != to || latest["cause"] != "answered" || latest["answered_by"] != to || latest["direction"] != "internal" {
		t.Errorf("call record: from %v to %v cause %v answered_by %v direction %v; want from %s to %s, answered by %[7]s, internal",
			latest["from"], latest["to"], latest["cause"], latest["answered_by"], latest["direction"], from, to)
	}
}

func startOf(r map[string]any) time.Time {
	s, _ := r["start"].(string)
	at, _ := time.Parse(time.RFC3339Nano, s)
	return at
}

// TestSoftphoneSHA256Digest: with sip.digestAlgorithms [sha-256, md5] the
// challenge leads with SHA-256, and linphonec registers answering it.
// (Debian 12's baresip 1.0 gives up on any SHA-256 challenge, which is why
// the default offers MD5 alone.)
func TestSoftphoneSHA256Digest(t *testing.T) {
	requireSoftphone(t, "linphonec", "linphone-cli")
	ports := newSoftphonePorts(t)
	p := startPBX(t, pbxConfig{RTPMin: ports.rtpMin, RTPMax: ports.rtpMax, LogLevel: "info", SIP: "    digestAlgorithms: [sha-256, md5]\n"})
	tone := filepath.Join(t.TempDir(), "bob.wav")
	writeToneWAV(t, tone, linphonecTone, 1)
	bob := startLinphonec(t, p, ports, "bob", tone)
	bob.waitRegistered(t)
	log := bob.log()
	if !strings.Contains(log, "WWW-Authenticate: Digest realm=\"127.0.0.1\"") {
		t.Fatalf("no challenge in linphonec's log")
	}
	first := log[strings.Index(log, "WWW-Authenticate:"):]
	first = first[:strings.IndexByte(first, '\n')]
	if !strings.Contains(first, "algorithm=SHA-256") {
		t.Errorf("first challenge %q, want SHA-256", first)
	}
	if !regexp.MustCompile(`(?m)^Authorization: .*algorithm=SHA-256`).MatchString(log) {
		t.Errorf("linphonec did not answer with SHA-256")
	}
}
