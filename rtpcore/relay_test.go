package rtpcore

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bridgedPair opens a session with two legs bridged, each pointed at a
// phone.
func bridgedPair(t *testing.T, e *Engine) (*Session, *Leg, *Leg, *phone, *phone) {
	t.Helper()
	s, err := e.NewSession(SessionOptions{ID: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	la, err := s.NewLeg("caller")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := s.NewLeg("callee")
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := newPhone(t), newPhone(t)
	la.SetRemote(pa.addr())
	lb.SetRemote(pb.addr())
	if err := s.Bridge(la, lb); err != nil {
		t.Fatal(err)
	}
	return s, la, lb, pa, pb
}

func TestRelayBothWays(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	const n = 50
	check := func(from, to *phone, fromLeg *Leg) {
		t.Helper()
		var sent [][]byte
		for i := 0; i < n; i++ {
			pkt := from.packet(PayloadPCMA, 160)
			sent = append(sent, pkt)
			from.sendTo(legTo(fromLeg), pkt)
		}
		for i := 0; i < n; i++ {
			got, src := to.recv(5 * time.Second)
			if got == nil {
				t.Fatalf("packet %d not relayed", i)
			}
			if !bytes.Equal(got, sent[i]) {
				h1, _ := ParseHeader(got)
				h2, _ := ParseHeader(sent[i])
				t.Fatalf("packet %d differs: got seq %d, sent seq %d", i, h1.Sequence, h2.Sequence)
			}
			if src != legTo(fromLeg.Peer()) {
				t.Fatalf("relayed from %v, want the peer leg's port %v", src, legTo(fromLeg.Peer()))
			}
		}
	}
	check(pa, pb, la)
	check(pb, pa, lb)

	waitFor(t, "counters", func() bool {
		return la.Stats().PacketsOut == n && lb.Stats().PacketsOut == n
	})
	sa, sb := la.Stats(), lb.Stats()
	for _, st := range []LegStats{sa, sb} {
		if st.PacketsIn != n || st.PacketsOut != n || st.BytesIn != n*172 || st.BytesOut != n*172 {
			t.Errorf("%s counters %+v", st.Name, st)
		}
		if st.PacketsLost != 0 || !st.Latched || !st.Bridged || st.LastPacket.IsZero() {
			t.Errorf("%s state %+v", st.Name, st)
		}
	}
	if sa.Remote != pa.addr() || sb.Remote != pb.addr() {
		t.Errorf("remotes %v %v", sa.Remote, sb.Remote)
	}
}

func TestRelayLossAndReorder(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	// 100 packets; drop 7 on purpose, swap two neighbours, send one twice.
	var pkts [][]byte
	for i := 0; i < 100; i++ {
		pkts = append(pkts, pa.packet(PayloadPCMU, 160))
	}
	drop := map[int]bool{3: true, 10: true, 11: true, 12: true, 50: true, 77: true, 98: true}
	var order []int
	for i := 0; i < 100; i++ {
		if !drop[i] {
			order = append(order, i)
		}
	}
	order[20], order[21] = order[21], order[20]
	order = append(order[:30], append([]int{order[29]}, order[30:]...)...) // a duplicate
	for _, i := range order {
		pa.sendTo(legTo(la), pkts[i])
	}
	for range order {
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("relay lost a packet on loopback")
		}
	}
	st := la.Stats()
	if st.PacketsIn != uint64(len(order)) {
		t.Errorf("PacketsIn %d, want %d", st.PacketsIn, len(order))
	}
	// The duplicate hides one loss in the RFC 3550 formula; 7 dropped - 1.
	if st.PacketsLost != 6 {
		t.Errorf("PacketsLost %d, want 6", st.PacketsLost)
	}
}

func TestRelayLossAcrossWrapAndSSRCChange(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	pa.seq = 65530
	sent := 0
	for i := 0; i < 20; i++ {
		pkt := pa.packet(PayloadPCMA, 160)
		if i == 8 || i == 9 { // lost across the wrap
			continue
		}
		pa.sendTo(legTo(la), pkt)
		sent++
	}
	pa.ssrc++ // a new stream: its own sequence space
	pa.seq = 100
	for i := 0; i < 10; i++ {
		pkt := pa.packet(PayloadPCMA, 160)
		if i == 5 {
			continue
		}
		pa.sendTo(legTo(la), pkt)
		sent++
	}
	for i := 0; i < sent; i++ {
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("missing packet")
		}
	}
	if st := la.Stats(); st.PacketsLost != 3 || st.PacketsIn != uint64(sent) {
		t.Errorf("lost %d in %d, want 3 and %d", st.PacketsLost, st.PacketsIn, sent)
	}
}

func TestJitterEstimate(t *testing.T) {
	// Feed the estimator directly: perfectly paced packets give zero
	// jitter; alternating ±10 ms arrival error gives about 20 ms/16*... > 0.
	var r recvStats
	h := Header{PayloadType: PayloadPCMA, SSRC: 1}
	for i := 0; i < 200; i++ {
		h.Sequence = uint16(i)
		h.Timestamp = uint32(i * 160)
		r.update(&h, 172, int64(i)*int64(20*time.Millisecond), 8000)
	}
	if j := r.jitterDuration(8000); j != 0 {
		t.Errorf("paced jitter %v", j)
	}
	var r2 recvStats
	for i := 0; i < 400; i++ {
		h.Sequence = uint16(i)
		h.Timestamp = uint32(i * 160)
		off := int64(0)
		if i%2 == 1 {
			off = int64(10 * time.Millisecond)
		}
		r2.update(&h, 172, int64(i)*int64(20*time.Millisecond)+off, 8000)
	}
	// |D| is 10 ms for every packet: the estimate converges to 10 ms.
	if j := r2.jitterDuration(8000); j < 9*time.Millisecond || j > 11*time.Millisecond {
		t.Errorf("alternating jitter %v, want about 10ms", j)
	}
}

func TestLatching(t *testing.T) {
	e := newEngine(t, Options{RelatchPackets: 3, RelatchSilence: time.Second})
	_, la, lb, _, pb := bridgedPair(t, e)
	decoy := newPhone(t) // the SDP address; never sends
	real := newPhone(t)  // where the phone really sends from (NAT)
	la.SetRemote(decoy.addr())

	// Before the phone sends, the SDP address is used.
	pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	if got, _ := decoy.recv(5 * time.Second); got == nil {
		t.Fatal("SDP address not used before latching")
	}
	// The first packet from the real source latches.
	real.sendTo(legTo(la), real.packet(PayloadPCMA, 160))
	waitFor(t, "latch", func() bool { return la.Remote() == real.addr() })
	if !la.Latched() {
		t.Error("not latched")
	}
	if got, _ := pb.recv(5 * time.Second); got == nil {
		t.Fatal("latched packet not relayed")
	}
	pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	if got, _ := real.recv(5 * time.Second); got == nil {
		t.Fatal("relay did not send to the latched address")
	}

	// A stranger spraying packets while the phone talks neither gets the
	// leg nor reaches the other side.
	stray := newPhone(t)
	for i := 0; i < 20; i++ {
		real.sendTo(legTo(la), real.packet(PayloadPCMA, 160))
		for k := 0; k < 5; k++ {
			stray.sendTo(legTo(la), stray.packet(PayloadPCMA, 160))
		}
	}
	for i := 0; i < 20; i++ {
		got, _ := pb.recv(5 * time.Second)
		if got == nil {
			t.Fatal("phone's packet missing")
		}
		if h, _ := ParseHeader(got); h.SSRC != real.ssrc {
			t.Fatal("stray packet relayed")
		}
	}
	waitFor(t, "strays counted", func() bool { return la.Stats().Strays == 100 })
	if la.Remote() != real.addr() {
		t.Fatalf("stray packets moved the latch to %v", la.Remote())
	}
	if got, _ := pb.recv(100 * time.Millisecond); got != nil {
		t.Fatal("stray packet relayed")
	}

	// A NAT rebinding: the old source falls silent, the new one sends on;
	// the leg follows.
	rebound := newPhone(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for la.Remote() != rebound.addr() {
		if time.Now().After(deadline) {
			t.Fatal("did not re-latch after a rebinding")
		}
		rebound.sendTo(legTo(la), rebound.packet(PayloadPCMA, 160))
		<-tick.C
	}
	pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	if got, _ := rebound.recv(5 * time.Second); got == nil {
		t.Fatal("relay did not follow the rebinding")
	}

	// New SDP (re-INVITE with another address) starts over.
	other := newPhone(t)
	la.SetRemote(other.addr())
	if la.Latched() || la.Remote() != other.addr() {
		t.Errorf("after SetRemote: latched %v remote %v", la.Latched(), la.Remote())
	}
	// The same SDP again (session refresh) keeps the state.
	other.sendTo(legTo(la), other.packet(PayloadPCMA, 160))
	waitFor(t, "latch other", func() bool { return la.Latched() })
	la.SetRemote(other.addr())
	if !la.Latched() {
		t.Error("session refresh dropped the latch")
	}
}

func TestUnknownRemoteCountsUnsent(t *testing.T) {
	e := newEngine(t, Options{})
	s, _ := e.NewSession(SessionOptions{})
	la, _ := s.NewLeg("a")
	lb, _ := s.NewLeg("b")
	lb.SetRemote(netip.MustParseAddrPort("0.0.0.0:0")) // RFC 2543 hold: nowhere to send
	s.Bridge(la, lb)
	pa := newPhone(t)
	la.SetRemote(pa.addr())
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	waitFor(t, "unsent", func() bool { return lb.Stats().Unsent == 1 })
	if lb.Stats().PacketsOut != 0 {
		t.Error("sent without an address")
	}
}

func TestNotBridgedNotRelayed(t *testing.T) {
	e := newEngine(t, Options{})
	s, la, lb, pa, pb := bridgedPair(t, e)
	// A losing fork leg: in the session, not bridged.
	lc, err := s.NewLeg("fork-2")
	if err != nil {
		t.Fatal(err)
	}
	pc := newPhone(t)
	lc.SetRemote(pc.addr())
	pc.sendTo(legTo(lc), pc.packet(PayloadPCMA, 160))
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	if got, _ := pb.recv(5 * time.Second); got == nil {
		t.Fatal("bridged packet missing")
	}
	if got, _ := pc.recv(200 * time.Millisecond); got != nil {
		t.Fatal("unbridged leg received media")
	}
	waitFor(t, "fork leg counted", func() bool { return lc.Stats().PacketsIn == 1 })
	if lb.Stats().PacketsOut != 1 || lc.Stats().PacketsOut != 0 {
		t.Errorf("fork media relayed: %+v", lc.Stats())
	}
	if err := lc.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.Legs()) != 2 {
		t.Errorf("legs after closing the fork: %d", len(s.Legs()))
	}
	// Bridging errors.
	if err := s.Bridge(la, la); !errors.Is(err, ErrForeignLeg) {
		t.Errorf("self bridge: %v", err)
	}
	if err := s.Bridge(la, lc); !errors.Is(err, ErrClosed) {
		t.Errorf("bridge to closed leg: %v", err)
	}
	e2 := newEngine(t, Options{})
	s2, _ := e2.NewSession(SessionOptions{})
	lx, _ := s2.NewLeg("x")
	if err := Bridge(la, lx); !errors.Is(err, ErrForeignLeg) {
		t.Errorf("cross-engine bridge: %v", err)
	}
}

func TestRebridge(t *testing.T) {
	e := newEngine(t, Options{})
	s, la, lb, pa, pb := bridgedPair(t, e)
	// Transfer: a new leg from another session takes lb's place.
	s2, _ := e.NewSession(SessionOptions{ID: "target"})
	lt, _ := s2.NewLeg("transfer-target")
	pt := newPhone(t)
	lt.SetRemote(pt.addr())
	if err := Bridge(la, lt); err != nil {
		t.Fatal(err)
	}
	if lb.Peer() != nil || la.Peer() != lt || lt.Peer() != la {
		t.Fatalf("peers after re-bridge: %v %v %v", lb.Peer(), la.Peer(), lt.Peer())
	}
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	if got, _ := pt.recv(5 * time.Second); got == nil {
		t.Fatal("transfer target got nothing")
	}
	if got, _ := pb.recv(200 * time.Millisecond); got != nil {
		t.Fatal("old peer still receives")
	}
	pt.sendTo(legTo(lt), pt.packet(PayloadPCMA, 160))
	if got, _ := pa.recv(5 * time.Second); got == nil {
		t.Fatal("caller got nothing from the transfer target")
	}
	s.Unbridge(la)
	if la.Peer() != nil || lt.Peer() != nil {
		t.Error("unbridge left a peer")
	}
}

func TestTapsSeeBothDirections(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	var mu sync.Mutex
	seen := map[Direction][]uint16{}
	remove := la.AddTap(TapFunc(func(p *Packet) {
		if p.Leg != la {
			t.Errorf("tap called for leg %s", p.Leg.Name())
		}
		if len(p.Payload()) != 160 || p.At.IsZero() {
			t.Errorf("tap packet payload %d at %v", len(p.Payload()), p.At)
		}
		mu.Lock()
		seen[p.Dir] = append(seen[p.Dir], p.Header.Sequence)
		mu.Unlock()
	}))
	q := NewQueueTap(4)
	removeQ := lb.AddTap(q)
	for i := 0; i < 10; i++ {
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
		pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	}
	for i := 0; i < 10; i++ {
		if got, _ := pa.recv(5 * time.Second); got == nil {
			t.Fatal("missing")
		}
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("missing")
		}
	}
	waitFor(t, "taps", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[In]) == 10 && len(seen[Out]) == 10
	})
	mu.Lock()
	if seen[In][0] != pa.seq-10 || seen[Out][0] != pb.seq-10 {
		t.Errorf("tap sequences in %v out %v", seen[In], seen[Out])
	}
	mu.Unlock()
	// The queue tap kept 4 copies and counted the rest as dropped. Its
	// leg's last packet may reach the far phone before the tap has seen
	// it (with two relay workers, 3 runs in 300 failed asserting at once).
	waitFor(t, "queue tap", func() bool { return len(q.C())+int(q.Dropped()) >= 20 })
	if len(q.C()) != 4 || q.Dropped() != 16 {
		t.Errorf("queue tap len %d dropped %d", len(q.C()), q.Dropped())
	}
	c := <-q.C()
	if c.Leg != lb || len(c.Payload()) != 160 {
		t.Errorf("queued copy %+v", c)
	}
	remove()
	removeQ()
	remove() // idempotent
	if la.taps.Load() != nil || lb.taps.Load() != nil {
		t.Error("taps not detached")
	}
}

// An In tap is shown what the far end sends and nothing the relay sends
// it, beside a full tap on the same leg that sees both.
func TestInTapSeesOnlyReceived(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	var mu sync.Mutex
	all, in := map[Direction]int{}, map[Direction]int{}
	removeAll := la.AddTap(TapFunc(func(p *Packet) {
		mu.Lock()
		all[p.Dir]++
		mu.Unlock()
	}))
	removeIn := la.AddInTap(TapFunc(func(p *Packet) {
		mu.Lock()
		in[p.Dir]++
		mu.Unlock()
	}))
	for i := 0; i < 10; i++ {
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
		pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	}
	waitFor(t, "taps", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return all[In] == 10 && all[Out] == 10 && in[In] == 10
	})
	mu.Lock()
	if in[Out] != 0 {
		t.Errorf("in tap saw %d packets sent", in[Out])
	}
	mu.Unlock()
	removeAll()
	if la.outTaps.Load() != nil || la.taps.Load() == nil {
		t.Error("with only an In tap left the leg still has Out taps, or lost its In tap")
	}
	removeIn()
	if la.taps.Load() != nil || la.outTaps.Load() != nil {
		t.Error("taps not detached")
	}
}

func TestInjectionReplacesRelay(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	var tapped atomic.Int32
	lb.AddTap(TapFunc(func(p *Packet) {
		if p.Dir == Out && p.Injected {
			tapped.Add(1)
		}
	}))
	inj, err := lb.Inject(PayloadPCMA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Inject(PayloadPCMA); !errors.Is(err, ErrInjecting) {
		t.Errorf("second injection: %v", err)
	}
	// Relayed audio toward lb is replaced.
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	waitFor(t, "replaced", func() bool { return lb.Stats().Replaced == 1 })
	payload := bytes.Repeat([]byte{0xD5}, 160)
	var first Header
	for i := 0; i < 5; i++ {
		if err := inj.Write(payload, 160); err != nil {
			t.Fatal(err)
		}
		h := pb.recvHeader()
		if h.SSRC == pa.ssrc {
			t.Fatal("relayed packet reached the injected leg")
		}
		if i == 0 {
			first = h
			if !h.Marker {
				t.Error("first injected packet without marker")
			}
			continue
		}
		if h.SSRC != first.SSRC || h.Sequence != first.Sequence+uint16(i) || h.Timestamp != first.Timestamp+uint32(160*i) || h.Marker {
			t.Errorf("packet %d header %+v after %+v", i, h, first)
		}
	}
	if tapped.Load() != 5 || lb.Stats().Injected != 5 {
		t.Errorf("tapped %d injected %d", tapped.Load(), lb.Stats().Injected)
	}
	inj.Close()
	if err := inj.Write(payload, 160); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	// Relay resumes, untouched.
	pkt := pa.packet(PayloadPCMA, 160)
	pa.sendTo(legTo(la), pkt)
	got, _ := pb.recv(5 * time.Second)
	if !bytes.Equal(got, pkt) {
		t.Fatal("relay did not resume unchanged")
	}
	// A second injection continues the sequence with the same SSRC and a
	// timestamp that moved forward.
	inj2, err := lb.Inject(PayloadPCMA)
	if err != nil {
		t.Fatal(err)
	}
	defer inj2.Close()
	inj2.Write(payload, 160)
	got, _ = pb.recv(5 * time.Second)
	h, _ := ParseHeader(got)
	if h.SSRC != first.SSRC || h.Sequence != first.Sequence+5 || int32(h.Timestamp-(first.Timestamp+5*160)) < 0 || !h.Marker {
		t.Errorf("second injection header %+v after %+v", h, first)
	}
}

func sine(n int) []int16 {
	out := make([]int16, n)
	for i := range out {
		// A 400 Hz-ish triangle, no math import needed.
		ph := i % 20
		if ph < 10 {
			out[i] = int16(ph*2000 - 10000)
		} else {
			out[i] = int16(10000 - (ph-10)*2000)
		}
	}
	return out
}

// noise returns n samples that differ from frame to frame.
func noise(n int) []int16 {
	out := make([]int16, n)
	x := uint32(12345)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = int16(x >> 16)
	}
	return out
}

func TestPlayerPacesWAV(t *testing.T) {
	e := newEngine(t, Options{})
	_, _, lb, _, pb := bridgedPair(t, e)
	pcm := noise(8000) // one second: 50 frames
	path := t.TempDir() + "/moh.wav"
	w, err := CreateWAV(path, 8000, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteSamples(pcm)
	w.Close()
	pl, err := OpenPlayer(path, PlayerOptions{PayloadType: PayloadPCMU})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		err := lb.Play(context.Background(), pl, PayloadPCMU)
		done <- result{err, time.Since(start)}
	}()
	var first, prev Header
	var res *result
	received, lastK := 0, -1
	lastAt := time.Now()
	for {
		got, _ := pb.recv(100 * time.Millisecond)
		if got == nil {
			if res != nil {
				break // played and drained
			}
			select {
			case r := <-done:
				res = &r
			default:
				if time.Since(lastAt) > 10*time.Second {
					t.Fatalf("nothing for 10s after %d frames", received)
				}
			}
			continue
		}
		lastAt = time.Now()
		h, _ := ParseHeader(got)
		if h.PayloadType != PayloadPCMU || len(h.Payload(got)) != 160 {
			t.Fatalf("packet %d: %+v", received, h)
		}
		if received == 0 {
			first = h
		} else if h.Sequence != prev.Sequence+1 || h.Timestamp <= prev.Timestamp || (h.Timestamp-prev.Timestamp)%160 != 0 {
			// A pacer that falls far behind skips frames: the timestamp
			// jumps by whole frames, the sequence never does.
			t.Fatalf("packet %d seq/ts %d/%d after %d/%d", received, h.Sequence, h.Timestamp, prev.Sequence, prev.Timestamp)
		}
		prev = h
		received++
		k := int((h.Timestamp - first.Timestamp) / 160)
		if k >= 50 {
			t.Fatalf("frame %d beyond the file", k)
		}
		if want := EncodeUlaw(nil, pcm[k*160:(k+1)*160]); !bytes.Equal(h.Payload(got), want) {
			t.Fatalf("frame %d payload differs from the encoded WAV", k)
		}
		lastK = k
	}
	if res.err != nil {
		t.Fatalf("play: %v", res.err)
	}
	// The end of 50 frames is due after 50 × 20 ms: the ticker cannot
	// send early, however late it runs.
	if res.took < 950*time.Millisecond {
		t.Errorf("one second of audio played in %v: not paced", res.took)
	}
	if received < 25 || lastK < 25 {
		t.Errorf("only %d of 50 frames sent, the last %d", received, lastK)
	}
	if lb.Injecting() {
		t.Error("injection still active after play")
	}
}

func TestPlayerLoopAndCancel(t *testing.T) {
	pl, err := NewPlayer(sine(100), PlayerOptions{PayloadType: PayloadPCMA, Loop: true})
	if err != nil {
		t.Fatal(err)
	}
	// Looping: 100 samples fill frames across the wrap.
	for i := 0; i < 5; i++ {
		p, n, err := pl.NextFrame(nil)
		if err != nil || n != 160 || len(p) != 160 {
			t.Fatalf("frame %d: %d %d %v", i, n, len(p), err)
		}
	}
	once, _ := NewPlayer(sine(200), PlayerOptions{PayloadType: PayloadPCMA})
	p, _, _ := once.NextFrame(nil)
	p, _, err = once.NextFrame(p)
	if err != nil || p[len(p)-1] != Silence(PayloadPCMA) {
		t.Fatalf("padded last frame: %v", err)
	}
	if _, _, err := once.NextFrame(p); err == nil {
		t.Fatal("no EOF")
	}
	if _, err := NewPlayer(nil, PlayerOptions{PayloadType: 18}); err == nil {
		t.Error("G.729 player accepted")
	}
	if p40, _ := NewPlayer(sine(10), PlayerOptions{PayloadType: PayloadPCMU, FrameSamples: 320}); p40.Ptime() != 40*time.Millisecond || pl.Ptime() != 20*time.Millisecond {
		t.Errorf("ptime %v / %v", p40.Ptime(), pl.Ptime())
	}

	e := newEngine(t, Options{})
	_, _, lb, _, _ := bridgedPair(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lb.Play(ctx, pl, PayloadPCMA) }()
	waitFor(t, "music", func() bool { return lb.Stats().Injected >= 3 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("play after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("play did not stop")
	}
	if lb.Injecting() {
		t.Error("injection left active")
	}
}

func TestMediaTimeout(t *testing.T) {
	e := newEngine(t, Options{})
	fired := make(chan time.Duration, 2)
	s, err := e.NewSession(SessionOptions{
		ID:           "timeout",
		MediaTimeout: time.Second,
		OnTimeout:    func(_ *Session, idle time.Duration) { fired <- idle },
	})
	if err != nil {
		t.Fatal(err)
	}
	la, _ := s.NewLeg("a")
	pa := newPhone(t)
	la.SetRemote(pa.addr())
	// Packets flow for twice the timeout: no timeout.
	tick := time.NewTicker(20 * time.Millisecond)
	stop := time.Now().Add(2 * time.Second)
	for now := range tick.C {
		if now.After(stop) {
			break
		}
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
		select {
		case idle := <-fired:
			t.Fatalf("timeout fired while packets flow (idle %v)", idle)
		default:
		}
	}
	tick.Stop()
	if s.Idle() > 900*time.Millisecond {
		t.Errorf("Idle %v while flowing", s.Idle())
	}
	// Silence: it fires once.
	select {
	case idle := <-fired:
		if idle < time.Second {
			t.Errorf("fired after %v of silence", idle)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timeout did not fire")
	}
	if !s.LastPacket().After(s.Stats().Created) || !s.LastPacket().Before(time.Now()) {
		t.Errorf("last packet %v", s.LastPacket())
	}
}

func TestMediaTimeoutDisabledAndRearmed(t *testing.T) {
	e := newEngine(t, Options{})
	fired := make(chan struct{}, 2)
	s, _ := e.NewSession(SessionOptions{MediaTimeout: 300 * time.Millisecond, OnTimeout: func(*Session, time.Duration) { fired <- struct{}{} }})
	// Disabled (hold) at once: silence does not fire.
	s.SetMediaTimeout(0)
	select {
	case <-fired:
		t.Fatal("fired while disabled")
	case <-time.After(900 * time.Millisecond):
	}
	// Re-armed after a silence longer than the timeout (resume after a
	// hold): it counts from the re-arming, then fires.
	armed := time.Now()
	s.SetMediaTimeout(300 * time.Millisecond)
	select {
	case <-fired:
		if since := time.Since(armed); since < 300*time.Millisecond {
			t.Errorf("fired %v after re-arming", since)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("re-armed timeout did not fire")
	}
}

func TestMediaTimeoutWithoutAnyPacket(t *testing.T) {
	e := newEngine(t, Options{})
	fired := make(chan struct{}, 1)
	s, _ := e.NewSession(SessionOptions{MediaTimeout: 200 * time.Millisecond, OnTimeout: func(*Session, time.Duration) { fired <- struct{}{} }})
	if _, err := s.NewLeg("a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("a call whose media never started did not time out")
	}
}

func TestSessionStatsAndClose(t *testing.T) {
	e := newEngine(t, Options{})
	s, la, lb, pa, pb := bridgedPair(t, e)
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	pb.recv(5 * time.Second)
	st := s.Stats()
	if st.ID != t.Name() || len(st.Legs) != 2 || st.Legs[0].Name != "caller" || st.Legs[0].PacketsIn != 1 {
		t.Errorf("stats %+v", st)
	}
	es := e.Stats()
	if es.Sessions != 1 || es.Legs != 2 || es.PortsInUse != 2 {
		t.Errorf("engine stats %+v", es)
	}
	portA := la.Port()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Both released ports rest; so may ports that another process (a
	// package tested in parallel) held when the pool tried them.
	if es := e.Stats(); es.Sessions != 0 || es.Legs != 0 || es.PortsInUse != 0 || es.PortsQuarantined < 2 {
		t.Errorf("engine stats after close %+v", es)
	}
	// The socket is really closed: the port can be bound again.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: portA})
	if err != nil {
		t.Fatalf("port %d still bound after close: %v", portA, err)
	}
	c.Close()
	if _, err := s.NewLeg("late"); !errors.Is(err, ErrClosed) {
		t.Errorf("leg on closed session: %v", err)
	}
	if _, err := lb.Inject(PayloadPCMA); !errors.Is(err, ErrClosed) {
		t.Errorf("inject on closed leg: %v", err)
	}
	e.Close()
	if _, err := e.NewSession(SessionOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("session on closed engine: %v", err)
	}
}

func TestMalformedDatagramsDropped(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	pa.sendTo(legTo(la), []byte("not rtp at all"))
	pa.sendTo(legTo(la), []byte{0x80, 0})
	pkt := pa.packet(PayloadPCMA, 160)
	pa.sendTo(legTo(la), pkt)
	got, _ := pb.recv(5 * time.Second)
	if !bytes.Equal(got, pkt) {
		t.Fatal("valid packet after garbage not relayed first")
	}
	waitFor(t, "malformed", func() bool { return la.Stats().Malformed == 2 })
}

// FuzzRecvStats feeds arbitrary sequences of headers to the receive
// statistics: nothing panics, loss is never negative and never exceeds
// the sequence span the packets could cover.
func FuzzRecvStats(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 5, 255, 255, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r recvStats
		var n int
		for i := 0; i+1 < len(b); i += 2 {
			h := Header{Sequence: uint16(b[i])<<8 | uint16(b[i+1]), SSRC: uint32(b[i] >> 7), PayloadType: b[i+1] & 0x7f, Timestamp: uint32(i) * 160}
			r.update(&h, 172, int64(i)*int64(20*time.Millisecond), 8000)
			n++
		}
		if l := r.lost(); l < 0 || l > int64(n)*65536 {
			t.Fatalf("lost %d after %d packets", l, n)
		}
		if r.packets != uint64(n) || r.jitterDuration(8000) < 0 {
			t.Fatalf("packets %d jitter %v", r.packets, r.jitterDuration(8000))
		}
	})
}

func TestTelephoneEventPTMapped(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	la.SetTelephoneEventPT(96)
	lb.SetTelephoneEventPT(101)
	ev := DTMFEvent{Event: 5, Volume: 10, Duration: 160}.Append(nil)
	send := func(from *phone, to *Leg, pt uint8, marker bool) []byte {
		pkt := AppendHeader(nil, marker, pt, from.seq, from.ts, from.ssrc)
		from.seq++
		pkt = append(pkt, ev...)
		from.sendTo(legTo(to), pkt)
		return pkt
	}
	check := func(got, sent []byte, wantPT uint8) {
		t.Helper()
		h, err := ParseHeader(got)
		if err != nil || h.PayloadType != wantPT {
			t.Fatalf("relayed PT %d, want %d (%v)", h.PayloadType, wantPT, err)
		}
		if !bytes.Equal(got[2:], sent[2:]) || got[0] != sent[0] || got[1]&0x80 != sent[1]&0x80 {
			t.Fatal("more than the payload type changed")
		}
	}
	sent := send(pa, la, 96, true)
	got, _ := pb.recv(5 * time.Second)
	check(got, sent, 101)
	sent = send(pb, lb, 101, false)
	got, _ = pa.recv(5 * time.Second)
	check(got, sent, 96)
	// Audio is untouched.
	audio := pa.packet(PayloadPCMA, 160)
	pa.sendTo(legTo(la), audio)
	if got, _ := pb.recv(5 * time.Second); !bytes.Equal(got, audio) {
		t.Fatal("audio changed")
	}
	// Same type on both sides, or unknown on one: untouched.
	lb.SetTelephoneEventPT(-1)
	sent = send(pa, la, 96, false)
	got, _ = pb.recv(5 * time.Second)
	check(got, sent, 96)
	if la.TelephoneEventPT() != 96 || lb.TelephoneEventPT() != -1 {
		t.Errorf("PTs %d %d", la.TelephoneEventPT(), lb.TelephoneEventPT())
	}
	// A receiving side whose SDP has no telephone-event gets no events,
	// and audio as before.
	lb.SetNoTelephoneEvent()
	send(pa, la, 96, false)
	pa.sendTo(legTo(la), audio)
	if got, _ := pb.recv(5 * time.Second); !bytes.Equal(got, audio) {
		t.Fatalf("after an event toward a leg without telephone-event, got %x, want the audio", got)
	}
	if lb.TelephoneEventPT() != -1 {
		t.Errorf("PT %d, want -1", lb.TelephoneEventPT())
	}
}

func TestDTMFTapOnLeg(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	digits := make(chan rune, 16)
	la.AddTap(NewDTMFTap(101, func(d rune, at time.Time) {
		if at.IsZero() {
			t.Error("zero arrival time")
		}
		digits <- d
	}))
	pkts := dtmfStream(t, 101, pa.ssrc, "*97#", 4000)
	for _, pkt := range pkts {
		pa.sendTo(legTo(la), pkt)
	}
	for range pkts {
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("DTMF packets not relayed")
		}
	}
	var got []rune
	for len(got) < 4 {
		select {
		case d := <-digits:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("digits %q", string(got))
		}
	}
	if string(got) != "*97#" || len(digits) != 0 {
		t.Errorf("digits %q (+%d)", string(got), len(digits))
	}
}

func TestCloseLeaksNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	e, err := New(Options{BindIP: loopback, Quarantine: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		s, err := e.NewSession(SessionOptions{MediaTimeout: time.Hour, OnTimeout: func(*Session, time.Duration) {}})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := s.NewLeg("a")
		b, _ := s.NewLeg("b")
		s.Bridge(a, b)
		inj, _ := b.Inject(PayloadPCMA)
		_ = inj
		if i%2 == 0 {
			s.Close()
		}
	}
	if st := e.Stats(); st.Sessions != 10 || st.PortsInUse != 20 {
		t.Errorf("stats %+v", st)
	}
	e.Close()
	if st := e.Stats(); st.Sessions != 0 || st.Legs != 0 || st.PortsInUse != 0 {
		t.Errorf("after close %+v", st)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestTotalsOutliveLegs: the engine's totals count open legs and keep what
// closed legs relayed, so they only grow.
func TestTotalsOutliveLegs(t *testing.T) {
	e := newEngine(t, Options{})
	s, la, lb, pa, pb := bridgedPair(t, e)
	const n = 20
	for range n {
		pa.sendTo(legTo(la), pa.packet(PayloadPCMU, 160))
	}
	for range n {
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("packet not relayed")
		}
	}
	waitFor(t, "counters", func() bool { return lb.Stats().PacketsOut == n })
	open := e.Totals()
	if open.Legs != 2 || open.PacketsIn != n || open.PacketsOut != n || open.BytesIn != n*172 {
		t.Fatalf("totals while open %+v", open)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed := e.Totals()
	var observed uint64
	for _, n := range closed.JitterCounts {
		observed += n
	}
	if observed != 1 || closed.JitterSum <= 0 {
		t.Errorf("jitter buckets %v sum %v: want the one leg that received audio", closed.JitterCounts, closed.JitterSum)
	}
	closed.JitterCounts, closed.JitterSum = open.JitterCounts, open.JitterSum
	if closed != open {
		t.Fatalf("totals changed when the legs closed: %+v, were %+v", closed, open)
	}
	_, la2, _, pa2, _ := bridgedPair(t, e)
	pa2.sendTo(legTo(la2), pa2.packet(PayloadPCMU, 160))
	waitFor(t, "second call's packet", func() bool { return e.Totals().PacketsIn == n+1 })
	if got := e.Totals(); got.Legs != 4 {
		t.Errorf("legs %d, want 4", got.Legs)
	}
}
