package recording

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pbx/rtpcore"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(Options{DataDir: t.TempDir(), Location: func(string) *time.Location { return time.FixedZone("UTC-5", -5*3600) }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wavFile is a parsed canonical stereo WAV.
type wavFile struct {
	format, channels, bits uint16
	rate, byteRate         uint32
	riffSize, dataSize     uint32
	left, right            []int16
}

func readStereoWAV(t *testing.T, path string) wavFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 44 || string(b[0:4]) != "RIFF" || string(b[8:16]) != "WAVEfmt " || string(b[36:40]) != "data" {
		t.Fatalf("%s: not a canonical WAV", path)
	}
	le := binary.LittleEndian
	w := wavFile{riffSize: le.Uint32(b[4:]), format: le.Uint16(b[20:]), channels: le.Uint16(b[22:]), rate: le.Uint32(b[24:]),
		byteRate: le.Uint32(b[28:]), bits: le.Uint16(b[34:]), dataSize: le.Uint32(b[40:])}
	if int(w.dataSize) != len(b)-44 || w.riffSize != w.dataSize+36 {
		t.Fatalf("%s: header sizes riff %d data %d for a file of %d bytes", path, w.riffSize, w.dataSize, len(b))
	}
	for i := 44; i+4 <= len(b); i += 4 {
		w.left = append(w.left, int16(le.Uint16(b[i:])))
		w.right = append(w.right, int16(le.Uint16(b[i+2:])))
	}
	return w
}

// relay is a bridged rtpcore session on loopback with a phone socket on
// each leg.
type relay struct {
	caller, callee *rtpcore.Leg
	a, b           *net.UDPConn // the caller's and the callee's phones
}

func newRelay(t *testing.T) *relay {
	t.Helper()
	e, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	s, err := e.NewSession(rtpcore.SessionOptions{ID: "rec"})
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{}
	if r.caller, err = s.NewLeg("caller"); err != nil {
		t.Fatal(err)
	}
	if r.callee, err = s.NewLeg("callee"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []**net.UDPConn{&r.a, &r.b} {
		if *c, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*c).Close() })
	}
	r.caller.SetRemote(r.a.LocalAddr().(*net.UDPAddr).AddrPort())
	r.callee.SetRemote(r.b.LocalAddr().(*net.UDPAddr).AddrPort())
	if err := rtpcore.Bridge(r.caller, r.callee); err != nil {
		t.Fatal(err)
	}
	return r
}

func rtpPacket(seq int, ssrc uint32, v int16) []byte {
	pkt := rtpcore.AppendHeader(nil, false, rtpcore.PayloadPCMA, uint16(seq), uint32(160*seq), ssrc)
	return append(pkt, pcma(v)...)
}

func TestRecorderThroughARealRelay(t *testing.T) {
	s := newStore(t)
	r := newRelay(t)
	start := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC) // 21 Nov in UTC-5
	id := "20261122T020000.000Z-abcd1234"
	bridged := time.Now()
	rec, err := s.Start(Sidecar{ID: id, Tenant: "acme", Start: start}, Legs{Caller: r.caller, Callee: r.callee, PayloadType: rtpcore.PayloadPCMA}, bridged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "inflight", id+".wav")); err != nil {
		t.Fatalf("no in-flight WAV while the call runs: %v", err)
	}
	// One second both ways, paced as phones send: the caller 1000, the
	// callee -2000.
	tick := time.NewTicker(20 * time.Millisecond)
	for n := 0; n < 50; n++ {
		<-tick.C
		if _, err := r.a.WriteToUDPAddrPort(rtpPacket(n, 11, 1000), r.caller.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.b.WriteToUDPAddrPort(rtpPacket(n, 22, -2000), r.callee.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	// The relay still relays: the callee's phone got the caller's audio.
	buf := make([]byte, 2048)
	_ = r.b.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := r.b.ReadFromUDPAddrPort(buf); err != nil {
		t.Fatalf("relay to the callee: %v", err)
	}
	// Let the last packets through the relay (the writer drains what is queued).
	deadline := time.Now().Add(2 * time.Second)
	for r.callee.Stats().PacketsIn < 50 || r.caller.Stats().PacketsIn < 50 {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not receive every packet")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := make(chan *Sidecar, 1)
	end := time.Now()
	rec.Stop(Sidecar{CallID: "abc@host", Direction: "inbound", From: "+15550100", To: "200", DID: "+15550200", Trunk: "carrier", AnsweredBy: "200", End: end},
		end, func(sc *Sidecar, err error) {
			if err != nil {
				t.Error(err)
			}
			got <- sc
		})
	sc := <-got
	s.Wait()
	if sc == nil {
		t.Fatal("no sidecar")
	}
	dir := filepath.Join(s.root, "2026", "11", "21")
	w := readStereoWAV(t, filepath.Join(dir, id+".wav"))
	if w.format != 1 || w.channels != 2 || w.rate != 8000 || w.bits != 16 || w.byteRate != 32000 {
		t.Fatalf("header %+v", w)
	}
	var lOK, rOK, crossed int
	for i := range w.left {
		switch {
		case w.left[i] == level(1000):
			lOK++
		case w.left[i] != 0:
			crossed++
		}
		switch {
		case w.right[i] == level(-2000):
			rOK++
		case w.right[i] != 0:
			crossed++
		}
	}
	if lOK != 8000 || rOK != 8000 || crossed != 0 {
		t.Errorf("left carries %d caller samples, right %d callee samples (want 8000 each), %d samples of anything else", lOK, rOK, crossed)
	}
	// The sidecar, read back from disk.
	disk, err := readSidecar(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, id+".wav"))
	sum := sha256.Sum256(b)
	if disk.ID != id || disk.Tenant != "acme" || disk.CallID != "abc@host" || disk.Direction != "inbound" || disk.From != "+15550100" ||
		disk.To != "200" || disk.DID != "+15550200" || disk.Trunk != "carrier" || disk.AnsweredBy != "200" ||
		!disk.Start.Equal(start) || !disk.End.Equal(end) || disk.Incomplete || disk.CDR != "" ||
		disk.Bytes != int64(len(b)) || disk.SHA256 != hex.EncodeToString(sum[:]) ||
		disk.DurationMS != int64(len(w.left))*1000/8000 {
		t.Errorf("sidecar %+v", disk)
	}
	if disk.Format != (Format{Container: "wav", Codec: "pcm_s16le", SourceCodec: "pcma", SampleRate: 8000, Channels: 2, Layout: "caller-left,far-right"}) {
		t.Errorf("format %+v", disk.Format)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.root, "inflight")); len(ents) != 0 {
		t.Errorf("inflight not empty: %v", ents)
	}
	// The taps are gone: the relay keeps relaying without the recorder.
	if _, err := r.a.WriteToUDPAddrPort(rtpPacket(60, 11, 1000), r.caller.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverPromotesATornInflightWAV(t *testing.T) {
	s := newStore(t)
	id := "20261121T151230.123Z-k3j9q2ab"
	meta := Sidecar{ID: id, Tenant: "acme", Direction: "internal", From: "100", To: "200", Start: time.Date(2026, 11, 21, 15, 12, 30, 123e6, time.UTC), Format: formatFor(0, 8000)}
	if err := writeSidecar(filepath.Join(s.inflight, id+".json"), &meta); err != nil {
		t.Fatal(err)
	}
	// A WAV whose header was last patched at 100 frames, with 1000.5 frames
	// of audio after it (a torn last frame), as a killed writer leaves it.
	wav := append(wavHeader(8000, 2, 400), make([]byte, 4002)...)
	for i := 44; i+4 <= len(wav); i += 4 {
		binary.LittleEndian.PutUint16(wav[i:], uint16(1234))
	}
	if err := os.WriteFile(filepath.Join(s.inflight, id+".wav"), wav, 0o640); err != nil {
		t.Fatal(err)
	}
	// A temporary file of an interrupted sidecar write goes.
	if err := os.WriteFile(filepath.Join(s.inflight, "."+id+".json.123"), []byte("{"), 0o640); err != nil {
		t.Fatal(err)
	}
	acts, err := s.Recover()
	if err != nil || len(acts) != 1 {
		t.Fatalf("recover: %v %q", err, acts)
	}
	dir := filepath.Join(s.root, "2026", "11", "21")
	w := readStereoWAV(t, filepath.Join(dir, id+".wav"))
	if len(w.left) != 1000 || w.channels != 2 || w.rate != 8000 || w.left[999] != 1234 {
		t.Errorf("repaired WAV: %d frames, %+v", len(w.left), w.format)
	}
	sc, err := readSidecar(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Incomplete || sc.Tenant != "acme" || sc.From != "100" || sc.Bytes != 44+4000 || sc.DurationMS != 125 || sc.SHA256 == "" || sc.End.IsZero() {
		t.Errorf("recovered sidecar %+v", sc)
	}
	if ents, _ := os.ReadDir(s.inflight); len(ents) != 0 {
		t.Errorf("inflight not empty: %v", ents)
	}
	// Recovery again finds nothing to do.
	if acts, err := s.Recover(); err != nil || len(acts) != 0 {
		t.Errorf("second recovery: %v %q", err, acts)
	}
}

func TestRecoverWritesTheSidecarOfAMovedWAV(t *testing.T) {
	s := newStore(t)
	id := "20261121T151230.123Z-zzzz0000"
	meta := Sidecar{ID: id, Tenant: "acme", Start: time.Date(2026, 11, 21, 15, 12, 30, 0, time.UTC), End: time.Date(2026, 11, 21, 15, 13, 0, 0, time.UTC), Format: formatFor(8, 8000)}
	if err := writeSidecar(filepath.Join(s.inflight, id+".json"), &meta); err != nil {
		t.Fatal(err)
	}
	dir := s.dayDir("acme", meta.Start)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// The finished WAV was renamed; the crash came before the sidecar.
	if err := os.WriteFile(filepath.Join(dir, id+".wav"), append(wavHeader(8000, 2, 32000), make([]byte, 32000)...), 0o640); err != nil {
		t.Fatal(err)
	}
	if acts, err := s.Recover(); err != nil || len(acts) != 1 {
		t.Fatalf("recover: %v %q", err, acts)
	}
	sc, err := readSidecar(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Incomplete || sc.DurationMS != 1000 || sc.Bytes != 32044 {
		t.Errorf("sidecar %+v", sc)
	}
	if _, err := os.Stat(filepath.Join(s.inflight, id+".json")); !os.IsNotExist(err) {
		t.Errorf("in-flight description kept: %v", err)
	}
}

func TestRecoverGivesAnOrphanWAVASidecar(t *testing.T) {
	s := newStore(t)
	id := "20261121T151230.123Z-orphan00"
	start := time.Date(2026, 11, 21, 15, 12, 30, 123e6, time.UTC)
	s.opts.Describe = func(got string) (Sidecar, bool) {
		if got != id {
			return Sidecar{}, false
		}
		return Sidecar{Tenant: "acme", Direction: "inbound", From: "+15550100", AnsweredBy: "200", Start: start, End: start.Add(time.Minute)}, true
	}
	dir := s.dayDir("acme", start)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A WAV put there by hand (or a copy restored without its sidecar).
	if err := os.WriteFile(filepath.Join(dir, id+".wav"), append(wavHeader(8000, 2, 16000), make([]byte, 16000)...), 0o640); err != nil {
		t.Fatal(err)
	}
	unknown := "20261121T151231.000Z-orphan01"
	if err := os.WriteFile(filepath.Join(dir, unknown+".wav"), append(wavHeader(8000, 2, 0), make([]byte, 3200)...), 0o640); err != nil {
		t.Fatal(err)
	}
	acts, err := s.Recover()
	if err != nil || len(acts) != 2 {
		t.Fatalf("recover: %v %q", err, acts)
	}
	sc, err := readSidecar(filepath.Join(dir, id+".json"))
	if err != nil || sc.Tenant != "acme" || sc.From != "+15550100" || sc.DurationMS != 500 || !sc.End.Equal(start.Add(time.Minute)) || sc.SHA256 == "" {
		t.Errorf("sidecar from the call record: %+v %v", sc, err)
	}
	sc, err = readSidecar(filepath.Join(dir, unknown+".json"))
	if err != nil || sc.ID != unknown || sc.DurationMS != 100 || sc.Start.IsZero() {
		t.Errorf("sidecar from the id alone: %+v %v", sc, err)
	}
	if acts, err := s.Recover(); err != nil || len(acts) != 0 {
		t.Errorf("second recovery: %v %q", err, acts)
	}
}

// Recordings running at once share the taps' log: each file carries its
// own call's audio on its own sides, and a packet tapped for a recording
// after it stopped (the relay was mid-packet as the tap came off) never
// reaches the recording that took its slot in the writer's table.
func TestRecordingsShareTheLogAndKeepTheirOwnAudio(t *testing.T) {
	s := newStore(t)
	r1, r2 := newRelay(t), newRelay(t)
	start := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC) // 21 Nov in UTC-5
	begin := func(id string, r *relay) *Recorder {
		rec, err := s.Start(Sidecar{ID: id, Tenant: "acme", Start: start}, Legs{Caller: r.caller, Callee: r.callee, PayloadType: rtpcore.PayloadPCMA}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// call is a relay and the levels its caller and callee send.
	type call struct {
		r      *relay
		l, rgt int16
	}
	talk := func(packets int, calls ...call) {
		var want []uint64
		for _, c := range calls {
			want = append(want, c.r.caller.Stats().PacketsIn+uint64(packets), c.r.callee.Stats().PacketsIn+uint64(packets))
		}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; n < packets; n++ {
			<-tick.C
			for _, c := range calls {
				if _, err := c.r.a.WriteToUDPAddrPort(rtpPacket(n, 11, c.l), c.r.caller.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				if _, err := c.r.b.WriteToUDPAddrPort(rtpPacket(n, 22, c.rgt), c.r.callee.LocalAddr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		deadline := time.Now().Add(2 * time.Second)
		for i, c := range calls {
			for c.r.caller.Stats().PacketsIn < want[2*i] || c.r.callee.Stats().PacketsIn < want[2*i+1] {
				if time.Now().After(deadline) {
					t.Fatal("the relay did not receive every packet")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	stop := func(rec *Recorder) {
		done := make(chan error, 1)
		rec.Stop(Sidecar{}, time.Now(), func(_ *Sidecar, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	id1, id2, id3 := "20261122T020000.000Z-aaaa0001", "20261122T020000.000Z-aaaa0002", "20261122T020000.000Z-aaaa0003"
	rec1, rec2 := begin(id1, r1), begin(id2, r2)
	talk(25, call{r1, 1000, -2000}, call{r2, 3000, -4000})
	stop(rec1)
	// The relay was mid-packet on rec1's tap as it came off.
	stale := rtpPacket(30, 11, 5000)
	h, err := rtpcore.ParseHeader(stale)
	if err != nil {
		t.Fatal(err)
	}
	rec3 := begin(id3, r1)
	if rec3.slot != rec1.slot {
		t.Fatalf("the third recording took slot %d, not the stopped one's %d: the test shows nothing", rec3.slot, rec1.slot)
	}
	rec1.taps[Left].TapRTP(&rtpcore.Packet{Dir: rtpcore.In, Header: h, Raw: stale, At: time.Now()})
	talk(25, call{r1, 1000, -2000}, call{r2, 3000, -4000})
	stop(rec2)
	stop(rec3)
	s.Wait()
	dir := filepath.Join(s.root, "2026", "11", "21")
	for _, c := range []struct {
		id           string
		l, rgt, want int
	}{{id1, 1000, -2000, 25 * 160}, {id2, 3000, -4000, 50 * 160}, {id3, 1000, -2000, 25 * 160}} {
		w := readStereoWAV(t, filepath.Join(dir, c.id+".wav"))
		var lOK, rOK, other int
		for i := range w.left {
			switch w.left[i] {
			case level(int16(c.l)):
				lOK++
			case 0:
			default:
				other++
			}
			switch w.right[i] {
			case level(int16(c.rgt)):
				rOK++
			case 0:
			default:
				other++
			}
		}
		if lOK != c.want || rOK != c.want || other != 0 {
			t.Errorf("%s: left carries %d caller samples, right %d callee samples (want %d each), %d samples of anything else", c.id, lOK, rOK, c.want, other)
		}
	}
}
