package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/pion/rtp"

	"pbx/rtpcore"
	"pbx/sipcore/siptest"
)

// mohRamp is a class's audio: a ramp with a slope of its own, 0.3 s long
// (not a whole number of 20 ms frames), so each class is told apart and
// the loop wraps inside a packet.
func mohRamp(t *testing.T, path string, slope int) []int16 {
	t.Helper()
	pcm := make([]int16, 2410)
	for i := range pcm {
		pcm[i] = int16((i*slope)%12000 - 6000)
	}
	w, err := rtpcore.CreateWAV(path, 8000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSamples(pcm); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return pcm
}

// heldMusic waits for the music a phone receives after index from (its
// first packet carries the marker bit) and checks n packets of it are the
// class looped from its start, in the phone's codec, as one RTP stream.
func heldMusic(t *testing.T, m *siptest.Media, from, n int, class []int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := -1
	for start < 0 {
		got, err := m.WaitReceived(ctx, from+1)
		if err != nil {
			t.Fatalf("no music on hold: %v", err)
		}
		for i := from; i < len(got) && start < 0; i++ {
			if got[i].Marker {
				start = i
			}
		}
		if start < 0 {
			from = len(got)
		}
	}
	got, err := m.WaitReceived(ctx, start+n)
	if err != nil {
		t.Fatalf("music on hold: %v", err)
	}
	pkts := got[start : start+n]
	first := pkts[0]
	skipped := 0
	for i, p := range pkts {
		// A pacer fallen more than a few frames behind (a loaded host)
		// skips frames: the timestamp moves on by whole frames, the
		// sequence does not, and the audio is the class at the timestamp.
		pos := int(p.Timestamp - first.Timestamp)
		if p.SSRC != first.SSRC || p.SequenceNumber != first.SequenceNumber+uint16(i) || pos%160 != 0 || pos/160 < i {
			t.Fatalf("music packet %d is not the stream's next: %+v after %+v", i, p.Header, first.Header)
		}
		skipped = pos/160 - i
		pcm := decodeG711(t, p)
		for k, s := range pcm {
			want := roundTrip(p.PayloadType, class[(pos+k)%len(class)])
			if s != want {
				t.Fatalf("music packet %d sample %d: %d, want %d (the class through G.711)", i, k, s, want)
			}
		}
	}
	if skipped > n {
		t.Fatalf("music skipped %d frames of %d", skipped, n)
	}
}

func decodeG711(t *testing.T, p rtp.Packet) []int16 {
	t.Helper()
	switch p.PayloadType {
	case rtpcore.PayloadPCMU:
		return rtpcore.DecodeUlaw(nil, p.Payload)
	case rtpcore.PayloadPCMA:
		return rtpcore.DecodeAlaw(nil, p.Payload)
	}
	t.Fatalf("payload type %d is not G.711", p.PayloadType)
	return nil
}

func roundTrip(pt uint8, s int16) int16 {
	if pt == rtpcore.PayloadPCMA {
		return rtpcore.AlawDecode(rtpcore.AlawEncode(s))
	}
	return rtpcore.UlawDecode(rtpcore.UlawEncode(s))
}

// twoWay checks RTP goes both ways between the phones again: every packet
// each sends reaches the other (music still in flight aside).
func twoWay(t *testing.T, a, b *siptest.Media) {
	t.Helper()
	for _, dir := range []struct {
		from, to *siptest.Media
		tag      string
	}{{a, b, "a2b"}, {b, a, "b2a"}} {
		before := len(dir.to.Received())
		want := map[string]bool{}
		for i := range 20 {
			payload := fmt.Appendf(nil, "%s%03d-%0150d", dir.tag, i, 0)
			if _, err := dir.from.Send(payload); err != nil {
				t.Fatal(err)
			}
			want[string(payload)] = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		for seen := before; len(want) > 0; {
			got, err := dir.to.WaitReceived(ctx, seen+1)
			if err != nil {
				cancel()
				t.Fatalf("%s: %d packets not relayed after the resume: %v", dir.tag, len(want), err)
			}
			for _, p := range got[seen:] {
				delete(want, string(p.Payload))
			}
			seen = len(got)
		}
		cancel()
	}
}

// TestMusicOnHold: erin (whose account names the class jazz) calls bob,
// both Go phones on real sockets against bin/pbx. Erin holds: the PBX
// answers her re-INVITE itself (recvonly), bob gets no re-INVITE and hears
// jazz, decoded sample for sample; the API shows the call held. Erin
// resumes: RTP flows both ways again. Bob holds: erin hears the System
// default. The call record ends answered.
func TestMusicOnHold(t *testing.T) {
	dir := t.TempDir()
	def := mohRamp(t, filepath.Join(dir, "default.wav"), 37)
	jazz := mohRamp(t, filepath.Join(dir, "jazz.wav"), 101)
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, LogLevel: "info",
		MOH: fmt.Sprintf("  moh:\n    default: %s\n    classes:\n      jazz: %s\n", filepath.Join(dir, "default.wav"), filepath.Join(dir, "jazz.wav")),
		Extra: `---
configVersion: pbx/v1
kind: Account
metadata: {name: erin, tenant: demo}
spec: {password: erin-secret, extension: "110", mohClass: jazz}
`})
	pbx := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p.sipPort))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	erin := siptest.NewPhone(t, siptest.Options{Username: "erin", Password: "erin-secret", Domain: "127.0.0.1", PBX: pbx})
	bob := siptest.NewPhone(t, siptest.Options{Username: "bob", Password: "bob-secret", Domain: "127.0.0.1", PBX: pbx})
	erin.MustRegister(ctx, 600)
	bob.MustRegister(ctx, 600)

	call := erin.Dial(ctx, "101")
	in := bob.WaitIncoming(15 * time.Second)
	select {
	case <-call.Done():
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	if st, err := call.Final(); st != 200 {
		t.Fatalf("call answered %d %v", st, err)
	}
	select {
	case <-in.Answered():
	case <-ctx.Done():
		t.Fatal("bob's side never confirmed")
	}
	twoWay(t, call.Media(), in.Media())
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	heldInAPI := func(want bool) {
		t.Helper()
		waitFor(t, fmt.Sprintf("the call held=%v in /v1/calls", want), 15*time.Second, func() bool {
			var calls struct {
				Calls []struct{ Held bool } `json:"calls"`
			}
			api.getJSON("/v1/calls", &calls)
			return len(calls.Calls) == 1 && calls.Calls[0].Held == want
		})
	}

	mark := len(in.Media().Received())
	res, ans, err := call.ReInvite(ctx, "sendonly")
	if err != nil || res.StatusCode != 200 || ans.Direction != "recvonly" {
		t.Fatalf("hold: %v %+v %v", res, ans, err)
	}
	heldMusic(t, in.Media(), mark, 50, jazz)
	select {
	case s := <-in.ReInvites():
		t.Fatalf("bob got a re-INVITE (%s): the hold was passed on", s.Direction)
	default:
	}
	heldInAPI(true)

	res, ans, err = call.ReInvite(ctx, "sendrecv")
	if err != nil || res.StatusCode != 200 || ans.Direction != "sendrecv" {
		t.Fatalf("resume: %v %+v %v", res, ans, err)
	}
	twoWay(t, call.Media(), in.Media())
	heldInAPI(false)

	mark = len(call.Media().Received())
	if res, ans, err := in.ReInvite(ctx, "inactive"); err != nil || res.StatusCode != 200 || ans.Direction != "inactive" {
		t.Fatalf("bob holds: %v %+v %v", res, ans, err)
	}
	heldMusic(t, call.Media(), mark, 25, def)
	if res, _, err := in.ReInvite(ctx, "sendrecv"); err != nil || res.StatusCode != 200 {
		t.Fatalf("bob resumes: %v %v", res, err)
	}
	twoWay(t, call.Media(), in.Media())
	select {
	case s := <-call.ReInvites():
		t.Fatalf("erin got a re-INVITE (%s)", s.Direction)
	default:
	}
	if err := call.Hangup(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Ended():
	case <-ctx.Done():
		t.Fatal("no BYE to bob")
	}
	var recs []map[string]any
	waitFor(t, "the call record", 15*time.Second, func() bool {
		recs = callRecords(t, p.dataDir)
		return len(recs) == 1
	})
	if recs[0]["cause"] != "answered" {
		t.Fatalf("call record %v", recs[0])
	}
}
