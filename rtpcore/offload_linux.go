package rtpcore

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"pbx/rtpcore/kfwd"
)

// offloadAfter is how many media packets in a row a leg's worker relays
// from the far end before the leg's direction moves into the kernel
// (Options.KernelForwarding): the stream has settled (latched, bridged,
// its SSRC known) by then.
const offloadAfter = 25

// offloadGrace is how long after a direction moved into the kernel a
// media packet still reaching the worker is taken for one that was queued
// on the socket before, not for one the kernel turned away (a new SSRC, a
// sequence jump), which takes the direction back.
const offloadGrace = 100 * time.Millisecond

// kernelRelay is an engine's kernel forwarding (see kfwd).
type kernelRelay struct {
	mu       sync.Mutex // serialises moving directions in and out
	f        *kfwd.Forwarder
	monoBase int64 // CLOCK_MONOTONIC at the engine's epoch, ns
	active   atomic.Int64
	routes   map[netip.Addr]route // guarded by mu
	moved    atomic.Uint64        // directions moved into the kernel
}

// route is a far end's way out (kfwd.Route), kept for routeTTL: the
// phones of one office are a handful of addresses, and finding the way
// (a socket, a netlink dump of the interfaces) would otherwise cost each
// call's setup twice.
type route struct {
	out int
	src netip.Addr
	err error
	at  time.Time
}

const routeTTL = 10 * time.Second

// route returns the way out to dst; called with k.mu held.
func (k *kernelRelay) route(dst netip.Addr) (int, netip.Addr, error) {
	now := time.Now()
	if r, ok := k.routes[dst]; ok && now.Sub(r.at) < routeTTL {
		return r.out, r.src, r.err
	}
	if len(k.routes) >= 4096 {
		clear(k.routes)
	}
	out, src, err := kfwd.Route(dst)
	k.routes[dst] = route{out: out, src: src, err: err, at: now}
	return out, src, err
}

// offload is one direction in the kernel: packets from the far end of leg
// to the far end of peer.
type offload struct {
	key          kfwd.Key
	peer         *Leg
	at           time.Time
	seedReceived uint64 // the stream's packets the worker had counted
}

// offloadState is a leg's part of the kernel forwarding.
type offloadState struct {
	off     atomic.Pointer[offload] // this leg's received packets, in the kernel
	userRun atomic.Int32            // media packets relayed by the worker since it last moved in or out
}

func (e *Engine) startKernel(opts Options) {
	if !opts.KernelForwarding {
		return
	}
	names := opts.KernelInterfaces
	if len(names) == 0 {
		var err error
		if names, err = kfwd.Interfaces(); err != nil {
			e.log.Warn("kernel forwarding off", "err", err)
			return
		}
	}
	f, err := kfwd.New(names, 2*e.pool.Size()+16)
	if err != nil {
		e.log.Warn("kernel forwarding off: the relay forwards every packet itself", "err", err)
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	base := ts.Nano() - int64(time.Since(e.epoch))
	e.kern = &kernelRelay{f: f, monoBase: base, routes: make(map[netip.Addr]route)}
	if f.Skipped != nil {
		e.log.Warn("kernel forwarding: some interfaces left to the relay", "err", f.Skipped)
	}
	e.log.Info("kernel forwarding on", "interfaces", f.Interfaces)
}

func (e *Engine) stopKernel() {
	if e.kern != nil {
		_ = e.kern.f.Close()
	}
}

// KernelForwarding reports whether the engine forwards settled streams in
// the kernel (Stats counts the directions there).
func (e *Engine) KernelForwarding() bool { return e.kern != nil }

func (e *Engine) kernelStats() (directions int, moves uint64) {
	if e.kern == nil {
		return 0, 0
	}
	return int(e.kern.active.Load()), e.kern.moved.Load()
}

// relayedMedia is called by the worker for each media packet it relayed
// from l's far end to peer's: after offloadAfter in a row, the direction
// moves into the kernel.
func (l *Leg) relayedMedia(peer *Leg) {
	k := l.sess.e.kern
	if k == nil || l.ko.off.Load() != nil {
		return
	}
	if l.ko.userRun.Add(1) < offloadAfter {
		return
	}
	l.ko.userRun.Store(0)
	k.mu.Lock()
	defer k.mu.Unlock()
	l.moveIn(k, peer)
}

// moveIn installs l's direction toward peer if nothing needs its packets
// in the relay: no taps on the way, no injection toward peer, both far
// ends known. Called with k.mu held.
func (l *Leg) moveIn(k *kernelRelay, peer *Leg) {
	if l.ko.off.Load() != nil || l.isClosed() || peer.isClosed() || l.peer.Load() != peer ||
		peer.inj.Load() != nil || l.taps.Load() != nil || peer.outTaps.Load() != nil ||
		(l.eventTaps.Load() != nil && l.tePT.Load() < 0) {
		return
	}
	from, to := l.target.Load(), peer.target.Load()
	if from == nil || to == nil || !from.ap.Addr().Is4() || !to.ap.Addr().Is4() {
		return
	}
	out, src, err := k.route(to.ap.Addr())
	if err != nil {
		return
	}
	if a := peer.local.Addr(); !a.IsUnspecified() {
		src = a
	}
	o := &offload{
		key:  kfwd.Key{Src: from.ap, Dst: netip.AddrPortFrom(l.local.Addr().Unmap(), l.local.Port())},
		peer: peer,
		at:   time.Now(),
	}
	rule := kfwd.Rule{Src: netip.AddrPortFrom(src, peer.local.Port()), Dst: to.ap, Out: out,
		EventPT: int(l.tePT.Load()), ClockRate: l.clockRate.Load()}
	l.mu.Lock()
	ok := l.latched && l.in.haveSeq
	if ok {
		rule.Stream = kfwd.Stream{
			SSRC: l.in.ssrc, ExtMax: l.in.cycles + uint32(l.in.maxSeq),
			Received: uint32(l.in.received), Jitter16: uint32(l.in.jitter * 16),
		}
		o.seedReceived = l.in.received
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	if err := k.f.Set(o.key, rule); err != nil {
		return // the map is full: the relay keeps the direction
	}
	l.ko.off.Store(o)
	k.active.Add(1)
	k.moved.Add(1)
}

// moveOut takes l's direction back from the kernel, folding the kernel's
// counts into the leg's. Called with k.mu held.
func (l *Leg) moveOut(k *kernelRelay) {
	o := l.ko.off.Swap(nil)
	l.ko.userRun.Store(0)
	if o == nil {
		return
	}
	k.active.Add(-1)
	c, err := k.f.Delete(o.key)
	if err != nil {
		return
	}
	l.mu.Lock()
	o.merge(&l.in, c)
	l.mu.Unlock()
	o.peer.pktsOut.Add(c.Packets)
	o.peer.bytesOut.Add(c.Bytes)
	if m := l.kernelMono(c); m != 0 {
		for {
			old := l.lastPacket.Load()
			if m <= old || l.lastPacket.CompareAndSwap(old, m) {
				break
			}
		}
	}
}

// merge folds the kernel's counters for the direction into r, the leg's
// received stream as the worker left it.
func (o *offload) merge(r *recvStats, c kfwd.Counters) {
	r.packets += c.Packets
	r.bytes += c.Bytes
	if c.Packets == 0 || !r.haveSeq || c.Stream.SSRC != r.ssrc {
		return
	}
	// Packets the worker counted after the direction moved in (queued on
	// the socket before) add to the kernel's count of the stream.
	r.received = uint64(c.Stream.Received) + (r.received - min(r.received, o.seedReceived))
	if ext := c.Stream.ExtMax; ext >= r.cycles+uint32(r.maxSeq) {
		r.cycles = ext &^ 0xffff
		r.maxSeq = uint16(ext)
	}
	r.jitter = float64(c.Stream.Jitter16) / 16
	r.haveTransit = false // the kernel's clock is not the worker's
}

// resetOffload takes l's direction and its peer's back from the kernel:
// something they depend on changed (a far end, a bridge, a tap, an
// injection). They move in again once they have relayed offloadAfter
// packets in a row.
//
// Callers change the state first: moveIn checks it under the same lock,
// so a direction moves in either before the reset, which takes it back,
// or after, seeing the change.
func (l *Leg) resetOffload() { l.resetOffloadWith(l.peer.Load()) }

// resetOffloadWith is resetOffload with l's peer (or former peer) p.
func (l *Leg) resetOffloadWith(p *Leg) {
	k := l.sess.e.kern
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l.moveOut(k)
	if p != nil {
		p.moveOut(k)
	}
}

// takeBack is called by the worker for a media packet from l's latched far
// end while l's direction is in the kernel: past offloadGrace the kernel
// turned it away (a new SSRC, a sequence jump, no route), and the worker
// takes the direction back to handle it.
func (l *Leg) takeBack() {
	o := l.ko.off.Load()
	if o == nil || time.Since(o.at) < offloadGrace {
		return
	}
	k := l.sess.e.kern
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.ko.off.Load() == o {
		l.moveOut(k)
	}
}

// kernelIn returns the counters of l's direction in the kernel, if it is
// there.
func (l *Leg) kernelIn() (*offload, kfwd.Counters, bool) {
	o := l.ko.off.Load()
	if o == nil {
		return nil, kfwd.Counters{}, false
	}
	c, err := l.sess.e.kern.f.Counters(o.key)
	return o, c, err == nil
}

// addKernel adds the kernel's part to st, the leg's counters as the worker
// keeps them: its received stream (in, a copy) and the packets sent out
// of it by its peer's direction.
func (l *Leg) addKernel(st *LegStats, in recvStats) {
	if l.sess.e.kern == nil {
		return
	}
	if o, c, ok := l.kernelIn(); ok {
		o.merge(&in, c)
		st.PacketsIn, st.BytesIn = in.packets, in.bytes
		st.PacketsLost = in.lost()
		st.Jitter = in.jitterDuration(l.clockRate.Load())
		if m := l.kernelMono(c); m > l.lastPacket.Load() {
			st.LastPacket = l.sess.e.epoch.Add(time.Duration(m))
		}
	}
	if p := l.peer.Load(); p != nil {
		if o, c, ok := p.kernelIn(); ok && o.peer == l {
			st.PacketsOut += c.Packets
			st.BytesOut += c.Bytes
		}
	}
}

func (l *Leg) kernelMono(c kfwd.Counters) int64 {
	if c.LastNanos == 0 {
		return 0
	}
	return int64(c.LastNanos) - l.sess.e.kern.monoBase
}

// lastMono is the engine mono time of the last packet from the far end,
// the kernel's included.
func (l *Leg) lastMono() int64 {
	m := l.lastPacket.Load()
	if l.sess.e.kern != nil {
		if _, c, ok := l.kernelIn(); ok {
			m = max(m, l.kernelMono(c))
		}
	}
	return m
}

// offloaded reports whether l's direction is in the kernel.
func (l *Leg) offloaded() bool { return l.ko.off.Load() != nil }
