package b2bua_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/pion/rtp"

	"pbx/rtpcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/siptest"
)

// mohClass is the music of the tests: a ramp not a whole number of frames
// long, so the loop wraps inside a packet.
func mohClass() []int16 {
	pcm := make([]int16, 1000)
	for i := range pcm {
		pcm[i] = int16((i*97)%8000 - 4000)
	}
	return pcm
}

// mohAsked records which side the Manager asked music for.
type mohAsked struct {
	mu       sync.Mutex
	byCaller []bool
	pcm      []int16
}

func (m *mohAsked) Music(call b2bua.CallInfo, byCaller bool) []int16 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byCaller = append(m.byCaller, byCaller)
	return m.pcm
}

func (m *mohAsked) asked() []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bool(nil), m.byCaller...)
}

// music waits for n packets of music at m received after index from (the
// first with the marker bit) and checks they are one stream: sequence
// numbers and timestamps continuous, one SSRC, payload type pt, decoding to
// the class looped from its start. It returns the index after them.
func music(t *testing.T, m *siptest.Media, from, n int, pt uint8, class []int16) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := -1
	for start < 0 {
		got, err := m.WaitReceived(ctx, from+1)
		if err != nil {
			t.Fatalf("no music: %v", err)
		}
		for i := from; i < len(got); i++ {
			if got[i].Marker {
				start = i
				break
			}
		}
		if start < 0 {
			from = len(got)
		}
	}
	got, err := m.WaitReceived(ctx, start+n)
	if err != nil {
		t.Fatalf("music: %v", err)
	}
	checkMusic(t, got[start:start+n], pt, class, 0)
	return start + n
}

// checkMusic checks pkts are consecutive packets of class looped from
// sample offset off.
func checkMusic(t *testing.T, pkts []rtp.Packet, pt uint8, class []int16, off int) {
	t.Helper()
	first := pkts[0]
	for i, p := range pkts {
		if p.PayloadType != pt || p.SSRC != first.SSRC {
			t.Fatalf("music packet %d: pt %d ssrc %x, want pt %d ssrc %x", i, p.PayloadType, p.SSRC, pt, first.SSRC)
		}
		// One stream: consecutive sequence numbers; the timestamp follows
		// the clock, so a player that fell behind on a loaded machine skips
		// whole frames (and their audio) rather than sending them late.
		frame := int(p.Timestamp-first.Timestamp) / 160
		if p.SequenceNumber != first.SequenceNumber+uint16(i) || (p.Timestamp-first.Timestamp)%160 != 0 || frame < i || frame > i+50 {
			t.Fatalf("music packet %d: seq %d ts %d after seq %d ts %d", i, p.SequenceNumber, p.Timestamp, first.SequenceNumber, first.Timestamp)
		}
		if i > 0 && p.Marker {
			t.Fatalf("music packet %d has the marker bit", i)
		}
		var pcm []int16
		if pt == rtpcore.PayloadPCMA {
			pcm = rtpcore.DecodeAlaw(nil, p.Payload)
		} else {
			pcm = rtpcore.DecodeUlaw(nil, p.Payload)
		}
		if len(pcm) != 160 {
			t.Fatalf("music packet %d: %d samples", i, len(pcm))
		}
		for k, s := range pcm {
			want := class[(off+160*frame+k)%len(class)]
			enc, _ := rtpcore.Encode(pt, nil, []int16{want})
			var dec []int16
			if pt == rtpcore.PayloadPCMA {
				dec = rtpcore.DecodeAlaw(nil, enc)
			} else {
				dec = rtpcore.DecodeUlaw(nil, enc)
			}
			if s != dec[0] {
				t.Fatalf("music packet %d sample %d: %d, want %d", i, k, s, dec[0])
			}
		}
	}
}

// relayed sends n packets from one phone and waits until the other
// received every one of them, whatever else (music still in flight) it
// received too.
func relayed(t *testing.T, from, to *siptest.Media, n int, tag string) {
	t.Helper()
	before := len(to.Received())
	want := map[string]bool{}
	for i := range n {
		payload := bytes.Repeat(fmt.Appendf(nil, "%s%03d", tag, i), 20)
		if _, err := from.Send(payload); err != nil {
			t.Fatal(err)
		}
		want[string(payload)] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for seen := before; ; {
		got, err := to.WaitReceived(ctx, seen+1)
		if err != nil {
			t.Fatalf("%s: %d packets not relayed: %v", tag, len(want), err)
		}
		for _, p := range got[seen:] {
			delete(want, string(p.Payload))
		}
		seen = len(got)
		if len(want) == 0 {
			return
		}
	}
}

// noneFrom checks that none of the packets m received after index from
// carries tag.
func noneFrom(t *testing.T, m *siptest.Media, from int, tag string) {
	t.Helper()
	for _, p := range m.Received()[from:] {
		if bytes.HasPrefix(p.Payload, []byte(tag)) {
			t.Fatalf("packet %q reached the other phone", p.Payload[:len(tag)+3])
		}
	}
}

// noReInvite checks that the phone got no re-INVITE.
func noReInvite(t *testing.T, c *siptest.Call, what string) {
	t.Helper()
	select {
	case s := <-c.ReInvites():
		t.Fatalf("%s: the other phone got a re-INVITE (%s)", what, s.Direction)
	default:
	}
}

// holdWith holds the call from c with direction dir, or the RFC 2543 way
// (c=0.0.0.0, sendrecv) for dir "c=0.0.0.0", and returns the answer.
func holdWith(t *testing.T, c *siptest.Call, dir string) (*sip.Response, *siptest.SDP, error) {
	t.Helper()
	if dir != "c=0.0.0.0" {
		return c.ReInvite(ctxT(t), dir)
	}
	body := siptest.BuildSDP(c.Media().Port(), []uint8{c.Media().PayloadType()}, "sendrecv")
	body = []byte(strings.ReplaceAll(string(body), "c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0"))
	if !strings.Contains(string(body), "0.0.0.0") {
		t.Fatalf("no c= line to rewrite in %q", body)
	}
	ri, err := c.StartReInvite(ctxT(t), body)
	if err != nil {
		return nil, nil, err
	}
	res, err := ri.Final(ctxT(t))
	if err != nil || !res.IsSuccess() {
		return res, nil, err
	}
	if err := ri.Ack(ctxT(t), nil); err != nil {
		return res, nil, err
	}
	ans, err := siptest.ParseSDP(res.Body())
	return res, ans, err
}

// TestMusicOnHold: with Options.MusicOnHold, a hold re-INVITE from either
// party is answered by the PBX (recvonly to sendonly, inactive to
// inactive), the other party gets no re-INVITE and hears the class in its
// own codec, nothing of the holder reaches it nor of it the holder; the
// resume is answered the same way and the relay runs both ways again.
func TestMusicOnHold(t *testing.T) {
	for _, tc := range []struct {
		fromCaller bool
		dir, want  string
	}{{true, "sendonly", "recvonly"}, {false, "sendonly", "recvonly"}, {true, "inactive", "inactive"}, {false, "c=0.0.0.0", "sendrecv"}} {
		t.Run(sideName(tc.fromCaller)+"/"+strings.TrimPrefix(tc.dir, "c="), func(t *testing.T) {
			moh := &mohAsked{pcm: mohClass()}
			e := newEnv(t, envOpts{moh: moh})
			alice := e.phone("udp", "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw", rtpcore.PayloadPCMA) // answers PCMA only
			call, in := answered(t, alice, bob, "102")
			actor, other := side(tc.fromCaller, call, in)
			relayed(t, actor.Media(), other.Media(), 10, "pre")

			mark := len(other.Media().Received())
			res, ans, err := holdWith(t, actor, tc.dir)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("hold: %v %v", res, err)
			}
			if ans.Direction != tc.want {
				t.Fatalf("hold answered %q, want %q", ans.Direction, tc.want)
			}
			noReInvite(t, other, "hold")
			next := music(t, other.Media(), mark, 25, rtpcore.PayloadPCMA, moh.pcm)
			if got := moh.asked(); len(got) != 1 || got[0] != tc.fromCaller {
				t.Fatalf("music asked with byCaller %v, want [%v]", got, tc.fromCaller)
			}
			if live := e.calls.Calls(); len(live) != 1 || !live[0].Held {
				t.Fatalf("live calls %+v, want one held", live)
			}
			// Neither party's audio crosses while held: the holder's own
			// (a phone's music, say) and the held party's.
			holderMark := len(actor.Media().Received())
			for i := range 5 {
				if _, err := actor.Media().Send(fmt.Appendf(nil, "hld%03d", i)); err != nil {
					t.Fatal(err)
				}
				if _, err := other.Media().Send(fmt.Appendf(nil, "hed%03d", i)); err != nil {
					t.Fatal(err)
				}
			}
			// Ten more music packets (200 ms) are time for them to arrive.
			music2 := len(other.Media().Received())
			if _, err := other.Media().WaitReceived(ctxT(t), music2+10); err != nil {
				t.Fatal(err)
			}
			noneFrom(t, other.Media(), next, "hld")
			noneFrom(t, actor.Media(), holderMark, "hed")

			res, ans, err = actor.ReInvite(ctxT(t), "sendrecv")
			if err != nil || res.StatusCode != 200 || ans.Direction != "sendrecv" {
				t.Fatalf("resume: %v %+v %v", res, ans, err)
			}
			noReInvite(t, other, "resume")
			relayed(t, actor.Media(), other.Media(), 20, "a2o")
			relayed(t, other.Media(), actor.Media(), 20, "o2a")
			if live := e.calls.Calls(); len(live) != 1 || live[0].Held {
				t.Fatalf("live calls %+v, want one not held", live)
			}
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			ev := e.rec.ended(t)
			kinds := e.rec.kinds()
			held, resumed := 0, 0
			for _, k := range kinds {
				switch k {
				case b2bua.EventHeld:
					held++
				case b2bua.EventResumed:
					resumed++
				}
			}
			if held != 1 || resumed != 1 || ev.Call.Held {
				t.Fatalf("events %v (held %v at the end)", kinds, ev.Call.Held)
			}
		})
	}
}

// TestMusicOnHoldBothAndRefresh: the held party's own re-INVITE during the
// hold (a session refresh) is answered by the PBX and the music goes on as
// one stream; when it holds too nobody hears anything; when the first
// holder resumes, it hears the music of the second one's hold.
func TestMusicOnHoldBothAndRefresh(t *testing.T) {
	moh := &mohAsked{pcm: mohClass()}
	e := newEnv(t, envOpts{moh: moh})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	pt := in.Media().PayloadType()

	mark := len(in.Media().Received())
	if res, _, err := call.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 {
		t.Fatalf("hold: %v %v", res, err)
	}
	next := music(t, in.Media(), mark, 10, pt, mohClass())
	// Bob refreshes his session: answered sendrecv by the PBX, alice hears
	// of it nothing, the music runs on without a restart.
	res, ans, err := in.ReInvite(ctxT(t), "sendrecv")
	if err != nil || res.StatusCode != 200 || ans.Direction != "sendrecv" {
		t.Fatalf("refresh: %v %+v %v", res, ans, err)
	}
	noReInvite(t, call, "refresh")
	got, err := in.Media().WaitReceived(ctxT(t), next+20)
	if err != nil {
		t.Fatal(err)
	}
	base := got[next-10]
	for i, p := range got[next-10 : next+20] {
		if p.SSRC != base.SSRC || p.SequenceNumber != base.SequenceNumber+uint16(i) || (i > 0 && p.Marker) {
			t.Fatalf("music restarted across the refresh at packet %d: %+v", i, p.Header)
		}
	}

	// Bob holds too: both phones hear nothing.
	if res, ans, err := in.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 || ans.Direction != "recvonly" {
		t.Fatalf("second hold: %v %+v %v", res, ans, err)
	}
	noReInvite(t, call, "second hold")
	// Alice's phone sends (it may play its own music): it reaches nobody,
	// and bob's received packets stop growing by more than what was in
	// flight.
	quietBob := len(in.Media().Received())
	quietAlice := len(call.Media().Received())
	for i := range 5 {
		if _, err := in.Media().Send(fmt.Appendf(nil, "bob%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Alice resumes: she hears bob's hold music (asked for bob's hold).
	if res, ans, err := call.ReInvite(ctxT(t), "sendrecv"); err != nil || res.StatusCode != 200 || ans.Direction != "sendrecv" {
		t.Fatalf("alice resumes: %v %+v %v", res, ans, err)
	}
	music(t, call.Media(), quietAlice, 10, pt, mohClass())
	noneFrom(t, call.Media(), quietAlice, "bob")
	if n := len(in.Media().Received()); n > quietBob+2 {
		t.Fatalf("bob received %d packets while both held", n-quietBob)
	}
	if got := moh.asked(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("music asked with byCaller %v, want [true false]", got)
	}
	// Bob resumes: two-way audio again.
	if res, _, err := in.ReInvite(ctxT(t), "sendrecv"); err != nil || res.StatusCode != 200 {
		t.Fatalf("bob resumes: %v %v", res, err)
	}
	relayed(t, call.Media(), in.Media(), 20, "a2b")
	relayed(t, in.Media(), call.Media(), 20, "b2a")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
}

// TestMusicOnHoldAttendedTransfer: alice holds bob (music, no re-INVITE to
// him), calls carol and transfers bob to her: the music stops, bob is
// re-INVITEd to sendrecv as before and bob and carol hear each other.
func TestMusicOnHoldAttendedTransfer(t *testing.T) {
	e := newEnv(t, envOpts{moh: &mohAsked{pcm: mohClass()}})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call1, toBob := answered(t, alice, bob, "102")
	mark := len(toBob.Media().Received())
	if res, _, err := call1.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 {
		t.Fatalf("hold: %v %v", res, err)
	}
	noReInvite(t, toBob, "hold")
	music(t, toBob.Media(), mark, 5, toBob.Media().PayloadType(), mohClass())
	call2, toCarol := answered(t, alice, carol, "103")

	refer(t, call1, call2.ReplacesURI("sip:103@"+domain))
	if got := notifies(t, call1); got[len(got)-1] != "SIP/2.0 200 OK" {
		t.Fatalf("notifies %q", got)
	}
	select {
	case s := <-toBob.ReInvites():
		if s.Direction != "sendrecv" {
			t.Fatalf("bob resumed with %q", s.Direction)
		}
	case <-time.After(wait):
		t.Fatal("bob was not taken off hold")
	}
	relayed(t, toCarol.Media(), toBob.Media(), 20, "c2b")
	relayed(t, toBob.Media(), toCarol.Media(), 20, "b2c")
	// The music is over: what bob receives now is carol's.
	after := len(toBob.Media().Received())
	relayed(t, toCarol.Media(), toBob.Media(), 10, "c2c")
	for _, p := range toBob.Media().Received()[after:] {
		if !bytes.HasPrefix(p.Payload, []byte("c2c")) {
			t.Fatalf("bob still gets other audio after the transfer: %+v", p.Header)
		}
	}
	if err := toBob.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.calls.WaitIdle(ctx); err != nil {
		t.Fatalf("%d calls still live: %v", e.calls.Active(), err)
	}
}

// TestMusicOnHoldByUpdate: a hold and a resume sent as UPDATE with SDP
// (RFC 3311) are answered like re-INVITEs (recvonly, then sendrecv) and
// play the music in between.
func TestMusicOnHoldByUpdate(t *testing.T) {
	moh := &mohAsked{pcm: mohClass()}
	e := newEnv(t, envOpts{moh: moh})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	mark := len(call.Media().Received())
	res, err := in.SendUpdate(ctxT(t), siptest.BuildSDP(in.Media().Port(), []uint8{in.Media().PayloadType()}, "sendonly"))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("update hold: %v %v", res, err)
	}
	if ans, err := siptest.ParseSDP(res.Body()); err != nil || ans.Direction != "recvonly" {
		t.Fatalf("update hold answered %+v %v", ans, err)
	}
	music(t, call.Media(), mark, 10, call.Media().PayloadType(), moh.pcm)
	noReInvite(t, call, "update hold")
	res, err = in.SendUpdate(ctxT(t), siptest.BuildSDP(in.Media().Port(), []uint8{in.Media().PayloadType()}, "sendrecv"))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("update resume: %v %v", res, err)
	}
	relayed(t, call.Media(), in.Media(), 20, "a2b")
	relayed(t, in.Media(), call.Media(), 20, "b2a")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
}

// TestUpdateHoldWithoutMusicOnHold: without Options.MusicOnHold an UPDATE
// with an offer, a hold included, is refused with 488 as before.
func TestUpdateHoldWithoutMusicOnHold(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	res, err := in.SendUpdate(ctxT(t), siptest.BuildSDP(in.Media().Port(), []uint8{0}, "sendonly"))
	if err != nil || res.StatusCode != 488 {
		t.Fatalf("update hold without music on hold: %v %v", res, err)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
}

// TestMusicOnHoldAfterDTMF: a hold arriving while the PBX plays a DTMF
// event toward the party to be held (an INFO turned into RFC 4733 events)
// is answered at once, and the music starts once the event is over.
func TestMusicOnHoldAfterDTMF(t *testing.T) {
	moh := &mohAsked{pcm: mohClass()}
	e := newEnv(t, envOpts{moh: moh})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	info := make(chan error, 1)
	go func() {
		s, err := call.SendInfo(ctxT(t), "application/dtmf-relay", []byte("Signal=7\r\nDuration=600\r\n"))
		if err == nil && s != 200 {
			err = fmt.Errorf("info answered %d", s)
		}
		info <- err
	}()
	// The event's first packet reached bob: the injection holds his leg.
	got, err := in.Media().WaitReceived(ctxT(t), 1)
	if err != nil || got[0].PayloadType != 101 {
		t.Fatalf("no event toward bob: %v %+v", err, got)
	}
	if res, _, err := call.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 {
		t.Fatalf("hold: %v %v", res, err)
	}
	select {
	case err := <-info:
		t.Fatalf("the hold was answered after the event ended (%v): the test proves nothing", err)
	default:
	}
	music(t, in.Media(), 1, 10, in.Media().PayloadType(), moh.pcm)
	if err := <-info; err != nil {
		t.Fatal(err)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
}

// TestMusicOnHoldAfterBlindTransfer: once bob transferred alice to carol,
// their holds are answered by the PBX too: carol holds (re-INVITE), alice
// hears the class asked for the answering party and gets no re-INVITE;
// alice holds by UPDATE, carol hears the caller's class; each resume
// restores two-way audio.
func TestMusicOnHoldAfterBlindTransfer(t *testing.T) {
	moh := &mohAsked{pcm: mohClass()}
	e := newEnv(t, envOpts{moh: moh})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call, in := answered(t, alice, bob, "102")
	refer(t, in, "sip:103@"+domain)
	toCarol := carol.WaitIncoming(wait)
	if toCarol == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, toCarol.Answered(), "carol answered")
	if got := notifies(t, in); got[len(got)-1] != "SIP/2.0 200 OK" {
		t.Fatalf("notifies %q", got)
	}
	waitCh(t, in.Ended(), "bye to the transferor")
	relayed(t, call.Media(), toCarol.Media(), 10, "a2c")

	mark := len(call.Media().Received())
	res, ans, err := toCarol.ReInvite(ctxT(t), "sendonly")
	if err != nil || res.StatusCode != 200 || ans.Direction != "recvonly" {
		t.Fatalf("carol holds: %v %+v %v", res, ans, err)
	}
	noReInvite(t, call, "carol's hold")
	music(t, call.Media(), mark, 10, call.Media().PayloadType(), moh.pcm)
	if live := e.calls.Calls(); len(live) != 1 || !live[0].Held {
		t.Fatalf("live calls %+v, want one held", live)
	}
	if res, _, err := toCarol.ReInvite(ctxT(t), "sendrecv"); err != nil || res.StatusCode != 200 {
		t.Fatalf("carol resumes: %v %v", res, err)
	}
	relayed(t, call.Media(), toCarol.Media(), 20, "a2c")
	relayed(t, toCarol.Media(), call.Media(), 20, "c2a")

	mark = len(toCarol.Media().Received())
	res, err = call.SendUpdate(ctxT(t), siptest.BuildSDP(call.Media().Port(), []uint8{call.Media().PayloadType()}, "inactive"))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("alice holds by update: %v %v", res, err)
	}
	noReInvite(t, toCarol, "alice's hold")
	music(t, toCarol.Media(), mark, 10, toCarol.Media().PayloadType(), moh.pcm)
	if res, _, err := call.ReInvite(ctxT(t), "sendrecv"); err != nil || res.StatusCode != 200 {
		t.Fatalf("alice resumes: %v %v", res, err)
	}
	relayed(t, call.Media(), toCarol.Media(), 20, "a2c")
	relayed(t, toCarol.Media(), call.Media(), 20, "c2a")
	if got := moh.asked(); len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("music asked with byCaller %v, want [false true]", got)
	}
	if live := e.calls.Calls(); len(live) != 1 || live[0].Held {
		t.Fatalf("live calls %+v, want one not held", live)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.calls.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}
