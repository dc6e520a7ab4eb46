package e2e

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestSoftphoneRecordingAcrossHold: baresip (alice, 1000 Hz) calls
// linphonec (bob, 600 Hz) through bin/pbx recording internal calls, puts
// the call on hold and resumes it. The call leaves one recording whose
// left channel carries alice's tone and the right bob's, each without the
// other's, spanning the whole call.
func TestSoftphoneRecordingAcrossHold(t *testing.T) {
	requireSoftphone(t, "baresip", "baresip")
	requireSoftphone(t, "linphonec", "linphone-cli")
	ports := newSoftphonePorts(t)
	apiPort := freePort(t)
	e := &softphoneEnv{}
	e.pbx = startPBX(t, pbxConfig{RTPMin: ports.rtpMin, RTPMax: ports.rtpMax, APIPort: apiPort, LogLevel: "info",
		Recording: "  recording:\n    enabled: true\n    mode: internal\n",
		Tokens:    "      - name: rec\n        token: " + recToken + "\n        scopes: [recordings:read]\n"})
	e.api = apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := t.TempDir()
	toneA, toneB := filepath.Join(dir, "alice.wav"), filepath.Join(dir, "bob.wav")
	writeToneWAV(t, toneA, baresipTone, 30)
	writeToneWAV(t, toneB, linphonecTone, 30)
	e.alice = startBaresip(t, e.pbx, ports, "alice", toneA)
	e.bob = startLinphonec(t, e.pbx, ports, "bob", toneB)
	softphonesRegister(t, e)

	began := time.Now()
	e.aliceCallsBob(t)
	e.alice.command(t, "hold", "")
	e.heldInAPI(t, true) // the PBX answers the hold itself (music on hold)
	e.alice.command(t, "resume", "")
	e.heldInAPI(t, false)
	before := e.alice.rtpReceived(t)
	waitFor(t, "media after the resume", stepTimeout, func() bool { return e.alice.rtpReceived(t) >= before+75 })
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	callLen := time.Since(began)

	rec := apiClient{t: t, base: e.api.base, token: recToken}
	var list struct {
		Recordings []struct {
			ID         string
			DurationMS int64 `json:"duration_ms"`
			Incomplete bool
		} `json:"recordings"`
	}
	waitFor(t, "the recording listed", stepTimeout, func() bool {
		rec.getJSON("/v1/recordings", &list)
		return len(list.Recordings) > 0
	})
	if len(list.Recordings) != 1 {
		t.Fatalf("%d recordings of one call with a hold, want 1", len(list.Recordings))
	}
	sc := list.Recordings[0]
	if sc.Incomplete || sc.DurationMS < 2000 || time.Duration(sc.DurationMS)*time.Millisecond > callLen {
		t.Errorf("recording %+v of a call of %s", sc, callLen)
	}
	code, wav := rec.do("GET", "/v1/recordings/demo/"+sc.ID+"/audio")
	if code != 200 {
		t.Fatalf("audio: %d", code)
	}
	left, right := channels(t, wav)
	for _, ch := range []struct {
		name        string
		pcm         []byte
		want, other float64
	}{{"left (alice, the caller)", left, baresipTone, linphonecTone}, {"right (bob, the far end)", right, linphonecTone, baresipTone}} {
		w := wavAudio{rate: 8000}
		for i := 0; i+2 <= len(ch.pcm); i += 2 {
			w.samples = append(w.samples, int16(binary.LittleEndian.Uint16(ch.pcm[i:])))
		}
		// A tone throughout, held stretches aside, scores well above 0.2.
		if got, wrong := w.toneShare(ch.want), w.toneShare(ch.other); got < 0.2 || wrong > 0.05 {
			t.Errorf("%s: %.3f of the energy at %.0f Hz (want > 0.2), %.3f at %.0f Hz (want < 0.05)", ch.name, got, ch.want, wrong, ch.other)
		}
		if got := w.last(time.Second).toneShare(ch.want); got < 0.2 {
			t.Errorf("%s after the resume: %.3f of the energy at %.0f Hz", ch.name, got, ch.want)
		}
	}
}
