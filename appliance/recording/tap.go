package recording

import "pbx/rtpcore"

// sideTap places what one party sends in its recording's mixer as it
// comes, on the relay's goroutine: one copy of the payload into the
// mixer's window, under the recorder's mixMu, which the writer holds only
// to take the final frames (never while writing them). Past maxFrames
// held for a side (the writer lagging), packets are dropped and counted
// rather than letting the window grow.
type sideTap struct {
	r    *Recorder
	side int
}

// TapRTP keeps what the party sent (In), never what the PBX sends or plays
// to it.
func (t *sideTap) TapRTP(p *rtpcore.Packet) {
	if p.Dir != rtpcore.In || p.Injected {
		return
	}
	r := t.r
	r.mixMu.Lock()
	switch {
	case r.mixDone:
	case len(r.mix.ch[t.side].buf) >= r.maxFrames:
		r.dropped.Add(1)
	default:
		// Only a final flush can fail; this one is not.
		_ = r.mix.packetNano(t.side, p.Header, p.Payload(), p.At.UnixNano())
	}
	r.mixMu.Unlock()
}
