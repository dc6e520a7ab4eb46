package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestSoftphoneMessageWaiting drives stock baresip with its mwi module
// (RFC 3842), registered as bob (101), through its control socket: with
// voicemail off its SUBSCRIBE for message-summary is refused 489 Bad Event
// once, and baresip closes the subscription without retrying; with a
// mailbox for bob the PBX answers 200 and a NOTIFY saying
// Messages-Waiting: no, bob's phone rejects alice's call (busy), alice
// leaves a message, and baresip gets the NOTIFY saying Messages-Waiting:
// yes. Baresip reports each NOTIFY it answered as an MWI_NOTIFY event
// carrying the body; the PBX logs each NOTIFY answered 2xx.
func TestSoftphoneMessageWaiting(t *testing.T) {
	requireSoftphone(t, "baresip", "baresip")
	t.Run("no_voicemail_489", softphoneMWIRefused)
	t.Run("voicemail_notify", softphoneMWINotify)
}

// softphoneMWIRefused: with no voicemail the SUBSCRIBE is answered 489 and
// baresip, still serving its control socket, does not subscribe again.
func softphoneMWIRefused(t *testing.T) {
	ports := newSoftphonePorts(t)
	p := startPBX(t, pbxConfig{RTPMin: ports.rtpMin, RTPMax: ports.rtpMax}) // debug: refusals are logged there
	tone := filepath.Join(t.TempDir(), "bob.wav")
	writeToneWAV(t, tone, baresipTone, 5)
	bob := startBaresip(t, p, ports, "bob", tone, baresipMWI)
	bob.waitRegistered(t)
	waitFor(t, "baresip's subscription closed by the 489", stepTimeout, func() bool {
		return strings.Contains(bob.proc.out.String(), "mwi: subscription for sip:bob@127.0.0.1 closed:  (489 ")
	})
	waitFor(t, "the PBX to log the SUBSCRIBE refused", stepTimeout, func() bool {
		return countLines(p.log.String(), `msg="sip request refused"`, "method=SUBSCRIBE status=489") > 0
	})
	bob.waitRegistered(t) // the control socket still answers
	if n := countLines(p.log.String(), `msg="sip request refused"`, "method=SUBSCRIBE status=489"); n != 1 {
		t.Errorf("%d SUBSCRIBEs refused 489, want 1", n)
	}
	if n := strings.Count(bob.proc.out.String(), "mwi: subscribing"); n != 1 {
		t.Errorf("baresip subscribed %d times, want 1", n)
	}
}

// softphoneMWINotify: with a mailbox for bob the subscription is answered
// with the lamp off, and a message left for bob turns it on.
func softphoneMWINotify(t *testing.T) {
	ports := newSoftphonePorts(t)
	cfg := voicemailConfig(t)
	cfg.RTPMin, cfg.RTPMax = ports.rtpMin, ports.rtpMax
	p := startPBX(t, cfg)
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort), token: vmToken}
	tone := filepath.Join(t.TempDir(), "bob.wav")
	writeToneWAV(t, tone, baresipTone, 5)
	bob := startBaresip(t, p, ports, "bob", tone, baresipMWI)
	bob.waitRegistered(t)

	body := bob.waitMWI(t, "Messages-Waiting: no")
	for _, want := range []string{"Message-Account: sip:bob@127.0.0.1", "Voice-Message: 0/0"} {
		if !strings.Contains(body, want) {
			t.Errorf("first NOTIFY's body %q has no %q", body, want)
		}
	}
	p.waitLog(`msg="mwi notify answered" component=mwi subscriber=bob@127.0.0.1 account=sip:bob@127.0.0.1 state="active;expires=600" new=0 old=0`, stepTimeout)

	uac, dir := startMessage(t, p, 8000)
	bob.waitEvent(t, "CALL_INCOMING")
	bob.command(t, "hangup", "") // 486: the call goes to bob's mailbox
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if ms := waitMessages(t, p, api, 1); ms[0].From != "100" {
		t.Errorf("message %+v, want one from 100", ms[0])
	}
	body = bob.waitMWI(t, "Messages-Waiting: yes")
	if !strings.Contains(body, "Voice-Message: 1/0") {
		t.Errorf("second NOTIFY's body %q, want Voice-Message: 1/0", body)
	}
	// The PBX logs the NOTIFY once baresip's 200 is in, which may be after
	// baresip's event.
	waitFor(t, "the PBX to log the NOTIFY with one new message answered", stepTimeout, func() bool {
		return countLines(p.log.String(), `msg="mwi notify answered"`, "new=1 old=0") == 1
	})
	if n := countLines(p.log.String(), `msg="mwi subscription" component=mwi subscriber=bob@`); n != 1 {
		t.Errorf("%d subscriptions made, want 1", n)
	}
}

// countLines counts the lines of log that contain every one of subs.
func countLines(log string, subs ...string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			n++
		}
	}
	return n
}
