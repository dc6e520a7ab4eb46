package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// carolTone is what the transfer target (a second baresip, extension 102)
// plays.
const carolTone = 1400.0

// transferEnv is softphoneEnv with a third phone, carol on a second
// baresip, as the transfer target.
type transferEnv struct {
	softphoneEnv
	carol       *baresip
	carrierPort int // the default trunk's port on 127.0.0.2
}

// TestSoftphoneTransfer drives blind and attended transfers with the real
// softphones to a third phone: baresip's /transfer (blind, from the
// caller), linphonec's "transfer <uri>" (blind, from the callee) and
// "transfer <id> --to-call <id>" (attended, REFER with Replaces). Each time
// the transferee and carol hear each other through the PBX, the transferor
// is released, and the call record has the transfer step and carol's leg.
func TestSoftphoneTransfer(t *testing.T) {
	requireSoftphone(t, "baresip", "baresip")
	requireSoftphone(t, "linphonec", "linphone-cli")
	ports := newSoftphonePorts(t)
	apiPort := freePort(t)
	e := &transferEnv{carrierPort: freePort(t)}
	e.pbx = startPBX(t, pbxConfig{RTPMin: ports.rtpMin, RTPMax: ports.rtpMax, APIPort: apiPort, LogLevel: "info",
		// A carrier (a SIPp UAS) as the default trunk, for a transfer to an
		// external number. (Security is inserted under spec as is.)
		Security: "  defaultTrunk: carrier\n",
		Extra:    fmt.Sprintf("---\nconfigVersion: pbx/v1\nkind: Trunk\nmetadata: {name: carrier}\nspec:\n  host: 127.0.0.2\n  port: %d\n", e.carrierPort)})
	e.api = apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := t.TempDir()
	toneA, toneB, toneC := filepath.Join(dir, "alice.wav"), filepath.Join(dir, "bob.wav"), filepath.Join(dir, "carol.wav")
	writeToneWAV(t, toneA, baresipTone, 30)
	writeToneWAV(t, toneB, linphonecTone, 30)
	writeToneWAV(t, toneC, carolTone, 30)
	e.alice = startBaresip(t, e.pbx, ports, "alice", toneA)
	e.bob = startLinphonec(t, e.pbx, ports, "bob", toneB)
	e.carol = startBaresip(t, e.pbx, ports, "carol", toneC)
	e.alice.waitRegistered(t)
	e.bob.waitRegistered(t)
	e.carol.waitRegistered(t)

	steps := []struct {
		name string
		run  func(*testing.T, *transferEnv)
	}{
		{"blind_by_baresip_caller", transferBlindByBaresip},
		{"blind_by_linphonec_callee", transferBlindByLinphonec},
		{"attended_by_linphonec", transferAttendedByLinphonec},
		{"blind_to_external_by_linphonec", transferExternalByLinphonec},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) {
			return
		}
	}
}

// carolAnswers waits for carol's incoming call from the PBX and answers it.
func (e *transferEnv) carolAnswers(t *testing.T) {
	t.Helper()
	e.carol.clearRecordings()
	e.carol.waitEvent(t, "CALL_INCOMING")
	e.carol.command(t, "accept", "")
	e.carol.waitEvent(t, "CALL_ESTABLISHED")
}

// carolHangsUp ends carol's call.
func (e *transferEnv) carolHangsUp(t *testing.T) {
	t.Helper()
	e.carol.command(t, "hangup", "")
	e.carol.waitEvent(t, "CALL_CLOSED")
}

// waitHeard waits until the recording at path holds at least d more than
// it did at from seconds.
func waitHeard(t *testing.T, who, path string, from float64, d time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s records %s more", who, d), d+stepTimeout, func() bool {
		w, err := readWAV(path)
		return err == nil && w.seconds() >= from+d.Seconds()
	})
}

func wavSeconds(path string) float64 {
	w, err := readWAV(path)
	if err != nil {
		return 0
	}
	return w.seconds()
}

// transferBlindByBaresip: alice (baresip) calls bob (linphonec) and
// transfers him to 102 with /transfer; bob then hears carol and carol bob,
// alice's call closes.
func transferBlindByBaresip(t *testing.T, e *transferEnv) {
	heard := e.aliceCallsBob(t)
	e.alice.command(t, "transfer", "sip:102@127.0.0.1")
	e.carolAnswers(t)
	e.alice.waitEvent(t, "CALL_CLOSED")
	at := wavSeconds(heard)
	waitHeard(t, "linphonec", heard, at, 1500*time.Millisecond)
	waitHeard(t, "carol", e.carol.heard(), 0, 1500*time.Millisecond)
	checkHeard(t, "linphonec after the transfer", heard, carolTone, linphonecTone, time.Second)
	checkHeard(t, "carol", e.carol.heard(), linphonecTone, carolTone, 0)
	e.bob.mark()
	e.carolHangsUp(t)
	e.bob.wait(t, "ended")
	e.checkTransferRecord(t, 1, "blind", "100", "102", []string{"101", "102"})
}

// transferBlindByLinphonec: alice (baresip) calls bob (linphonec), who
// transfers her to 102 with "transfer <uri>"; alice then hears carol.
func transferBlindByLinphonec(t *testing.T, e *transferEnv) {
	e.aliceCallsBob(t)
	e.bob.mark()
	e.bob.command(t, "transfer sip:102@127.0.0.1")
	e.carolAnswers(t)
	e.bob.wait(t, "ended")
	heard := e.alice.heard()
	at := wavSeconds(heard)
	waitHeard(t, "carol", e.carol.heard(), 0, 1500*time.Millisecond)
	waitHeard(t, "baresip", heard, at, 1500*time.Millisecond)
	checkHeard(t, "carol", e.carol.heard(), baresipTone, carolTone, 0)
	checkHeard(t, "baresip after the transfer", heard, carolTone, baresipTone, time.Second)
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.carol.waitEvent(t, "CALL_CLOSED")
	e.checkTransferRecord(t, 1, "blind", "101", "102", []string{"101", "102"})
}

// transferExternalByLinphonec: bob (linphonec) transfers alice to an
// external number: the PBX routes it through the default trunk to a SIPp
// carrier that echoes RTP, so alice hears her own tone come back; her
// hang-up reaches the carrier, and the record has the trunk leg.
func transferExternalByLinphonec(t *testing.T, e *transferEnv) {
	requireSIPp(t)
	dir := scenarioDir(t, nil)
	uas := startSIPp(t, dir, "carrier", 30*time.Second, "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(e.carrierPort), "-i", "127.0.0.2", "-mi", "127.0.0.2", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
	waitFor(t, "the carrier listening", stepTimeout, func() bool { return udpBound("127.0.0.2", e.carrierPort) })
	e.aliceCallsBob(t)
	e.bob.mark()
	e.bob.command(t, "transfer sip:5551234@127.0.0.1")
	e.bob.wait(t, "ended")
	heard := e.alice.heard()
	at := wavSeconds(heard)
	waitHeard(t, "baresip", heard, at, 1500*time.Millisecond)
	checkHeard(t, "baresip hearing the carrier's echo", heard, baresipTone, linphonecTone, time.Second)
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	mustExit0(t, uas, dir, "carrier")
	e.checkTransferRecord(t, 1, "blind", "101", "5551234", []string{"101", "carrier"})
}

// udpBound reports whether something listens on ip:port (binding it fails).
func udpBound(ip string, port int) bool {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		return true
	}
	c.Close()
	return false
}

var linphoneCallID = regexp.MustCompile(`assigned id (\d+)`)

// transferAttendedByLinphonec: bob (linphonec) calls alice (baresip),
// pauses her (hold), calls carol, and joins them with "transfer
// <alice's call> --to-call <carol's call>": a REFER with Replaces. Alice
// and carol then hear each other; both of bob's calls end.
func transferAttendedByLinphonec(t *testing.T, e *transferEnv) {
	e.bob.mark()
	e.bob.command(t, "call sip:100@127.0.0.1")
	id1 := linphoneCallID.FindStringSubmatch(e.bob.wait(t, "assigned id"))
	e.alice.waitEvent(t, "CALL_INCOMING")
	e.alice.command(t, "accept", "")
	e.alice.waitEvent(t, "CALL_ESTABLISHED")
	e.bob.wait(t, "connected")
	if id1 == nil {
		t.Fatal("linphonec printed no call id")
	}
	e.bob.mark()
	e.bob.command(t, "pause "+id1[1])
	e.bob.wait(t, "is now paused")

	e.bob.mark()
	e.bob.command(t, "call sip:102@127.0.0.1")
	id2 := linphoneCallID.FindStringSubmatch(e.bob.wait(t, "assigned id"))
	e.carolAnswers(t)
	e.bob.wait(t, "connected")
	if id1 == nil || id2 == nil {
		t.Fatalf("linphonec call ids not printed: %v %v", id1, id2)
	}
	before := rtpReceivedAll(t, e.alice)
	e.bob.mark()
	e.bob.command(t, fmt.Sprintf("transfer %s --to-call %s", id1[1], id2[1]))
	waitFor(t, "both of linphonec's calls end", stepTimeout, func() bool {
		return countSubstr(e.bob.proc.out.Since(), "ended") >= 2
	})
	at := wavSeconds(e.carol.heard())
	waitHeard(t, "carol", e.carol.heard(), at, 1500*time.Millisecond)
	checkHeard(t, "carol after the transfer", e.carol.heard(), baresipTone, linphonecTone, time.Second)
	// baresip 1.0 drops its recording filter when a hold restarts its
	// player, so alice's side is checked by packet count.
	waitFor(t, "baresip receives carol's RTP", stepTimeout, func() bool { return rtpReceivedAll(t, e.alice) >= before+50 })
	e.alice.command(t, "hangup", "")
	e.alice.waitEvent(t, "CALL_CLOSED")
	e.carol.waitEvent(t, "CALL_CLOSED")
	e.checkTransferRecord(t, 2, "attended", "101", "102", []string{"100"})
}

// rtpReceivedAll is the RTP packets baresip's current call received from
// every source it saw (a transfer changes the SSRC).
func rtpReceivedAll(t *testing.T, b *baresip) int {
	t.Helper()
	n := 0
	for _, m := range rtpReceivedRe.FindAllStringSubmatch(b.command(t, "audio_debug", ""), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

func countSubstr(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// checkTransferRecord waits for n more call records and checks that one of
// them has a transfer step (kind, by, to) answered, and legs to the
// targets given.
func (e *transferEnv) checkTransferRecord(t *testing.T, n int, kind, by, to string, legs []string) {
	t.Helper()
	e.calls += n
	var recs []map[string]any
	waitFor(t, fmt.Sprintf("%d call records", e.calls), stepTimeout, func() bool {
		recs = callRecords(t, e.pbx.dataDir)
		return len(recs) >= e.calls
	})
	for _, r := range recs {
		steps, _ := r["steps"].([]any)
		for _, s := range steps {
			st, _ := s.(map[string]any)
			if st["type"] != "transfer" || st["kind"] != kind || st["by"] != by || st["to"] != to {
				continue
			}
			if st["result"] != "answered" || r["cause"] != "answered" {
				t.Errorf("transfer step %v in a record with cause %v", st, r["cause"])
			}
			var got []string
			for _, l := range r["legs"].([]any) {
				leg := l.(map[string]any)
				got = append(got, fmt.Sprint(leg["target"]))
				if end, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(leg["end"])); end.Year() < 2000 {
					t.Errorf("leg %v has no end", leg)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(legs) {
				t.Errorf("legs %v, want %v", got, legs)
			}
			return
		}
	}
	t.Errorf("no record with a %s transfer step by %s to %s among %d records", kind, by, to, len(recs))
}
