package rtpcore

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestInjectionReplaceLeavesNoGap: while the far end of one leg floods
// the relay, the injection toward the other leg is replaced again and
// again, and not one relayed packet reaches that leg's far end (with
// Close then Inject, some did: music on hold switching feeds let the
// other phone's packets through).
func TestInjectionReplaceLeavesNoGap(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	inj, err := lb.Inject(PayloadPCMU)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pa.conn.WriteToUDPAddrPort(pa.packet(PayloadPCMU, 160), legTo(la)); err != nil {
				return
			}
			n++
			if n%64 == 0 {
				time.Sleep(50 * time.Microsecond) // let the socket drain
			}
		}
	}()
	waitFor(t, "relayed packets replaced", func() bool { return lb.Stats().Replaced > 0 })
	before := lb.Stats().Replaced
	// At least swaps replacements, and on until 200 packets were relayed
	// meanwhile (bounded in time).
	const swaps = 3000
	deadline := time.Now().Add(5 * time.Second)
	more := func(i int) bool {
		return i < swaps || i%100 != 0 || lb.Stats().Replaced-before < 200
	}
	for i := 0; more(i) && time.Now().Before(deadline); i++ {
		if inj, err = inj.Replace(PayloadPCMU); err != nil {
			close(stop)
			t.Fatalf("replace %d: %v", i, err)
		}
	}
	close(stop)
	n := <-sent
	during := lb.Stats().Replaced - before
	if during < 200 {
		t.Fatalf("%d packets only were relayed during the replacements (%d sent)", during, n)
	}
	// Whatever the relay still holds is replaced too; then nothing of
	// pa's may have reached pb.
	time.Sleep(50 * time.Millisecond)
	for {
		got, _ := pb.recv(20 * time.Millisecond)
		if got == nil {
			break
		}
		if h, err := ParseHeader(got); err == nil && h.SSRC == pa.ssrc {
			t.Fatalf("a relayed packet reached the injected leg's far end (%d replaced of %d sent while replacing)", during, n)
		}
	}
	t.Logf("%d packets replaced while the injection was replaced", during)
	inj.Close()
}

// TestInjectionReplace: the replacement continues the leg's stream (same
// SSRC, next sequence number, marker on its first packet) in its own
// payload type; the replaced injection writes no more, and neither a
// closed injection nor one on a closed leg can be replaced.
func TestInjectionReplace(t *testing.T) {
	e := newEngine(t, Options{})
	_, _, lb, _, pb := bridgedPair(t, e)
	first, err := lb.Inject(PayloadPCMA)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{0xD5}, 160)
	for range 2 {
		if err := first.Write(payload, 160); err != nil {
			t.Fatal(err)
		}
	}
	pb.recvHeader()
	h1 := pb.recvHeader()
	second, err := first.Replace(PayloadPCMU)
	if err != nil {
		t.Fatal(err)
	}
	if !lb.Injecting() {
		t.Fatal("no injection after the replacement")
	}
	if err := first.Write(payload, 160); !errors.Is(err, ErrClosed) {
		t.Errorf("write on the replaced injection: %v", err)
	}
	if _, err := first.Replace(PayloadPCMU); !errors.Is(err, ErrClosed) {
		t.Errorf("replacing a replaced injection: %v", err)
	}
	if _, err := lb.Inject(PayloadPCMU); !errors.Is(err, ErrInjecting) {
		t.Errorf("inject beside the replacement: %v", err)
	}
	if err := second.Write(payload, 160); err != nil {
		t.Fatal(err)
	}
	h2 := pb.recvHeader()
	if h2.SSRC != h1.SSRC || h2.Sequence != h1.Sequence+1 || !h2.Marker || h2.PayloadType != PayloadPCMU || int32(h2.Timestamp-(h1.Timestamp+160)) < 0 {
		t.Errorf("after the replacement %+v, before %+v", h2, h1)
	}
	// The first injection's Close is late and harmless.
	first.Close()
	if !lb.Injecting() {
		t.Fatal("closing the replaced injection ended its replacement")
	}
	second.Close()
	if lb.Injecting() {
		t.Fatal("closed replacement still injecting")
	}
	if _, err := second.Replace(PayloadPCMU); !errors.Is(err, ErrClosed) {
		t.Errorf("replacing a closed injection: %v", err)
	}
	third, err := lb.Inject(PayloadPCMU)
	if err != nil {
		t.Fatal(err)
	}
	lb.Close()
	if _, err := third.Replace(PayloadPCMU); !errors.Is(err, ErrClosed) {
		t.Errorf("replacing on a closed leg: %v", err)
	}
	if lb.Injecting() {
		t.Error("a closed leg keeps an injection")
	}
}
