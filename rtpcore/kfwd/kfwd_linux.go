// Package kfwd forwards relayed RTP in the kernel: a tc program rewrites
// a leg's datagrams to its peer's far end, so that the relay sees none.
package kfwd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Key is a rule's match: a datagram from Src to Dst.
type Key struct {
	Src, Dst netip.AddrPort
}

// Rule rewrites a matched datagram to come from Src and go to Dst.
type Rule struct {
	Src, Dst netip.AddrPort
	// EventPT is the telephone-event payload type left to the relay
	// (-1: none).
	EventPT int
	// Out is the index of the interface to send out of when Dst is not a
	// local address (see Route); 0: Dst is local.
	Out int
	// ClockRate is the stream's RTP clock rate for its jitter; 0: none.
	ClockRate uint32
	// Stream is the stream the rule takes over: only its SSRC is
	// forwarded, and its sequence and jitter go on from there.
	Stream Stream
}

// Stream is the state of a received RTP stream (RFC 3550 A.1, A.8).
type Stream struct {
	SSRC     uint32
	ExtMax   uint32 // highest sequence number, plus 65536 per wrap
	Received uint32 // packets of the stream
	Jitter16 uint32 // interarrival jitter in clock units, times 16
}

// Counters are a rule's counts since it was set, and its stream.
type Counters struct {
	Packets, Bytes uint64
	LastNanos      uint64 // CLOCK_MONOTONIC of the last packet; 0: none
	Stream         Stream
}

// Forwarder holds the program, its rules and its attachments.
type Forwarder struct {
	// Interfaces are those the program watches; Skipped says why the
	// others asked for are not (nil: none).
	Interfaces []string
	Skipped    error

	rules *ebpf.Map
	prog  *ebpf.Program
	links []link.Link
}

// New loads the program and attaches it to the ingress of the named
// interfaces.
func New(ifaces []string, maxRules int) (*Forwarder, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "pbx_rtp_rules", Type: ebpf.Hash, KeySize: 12, ValueSize: valueSize, MaxEntries: uint32(maxRules),
	})
	if err != nil {
		return nil, fmt.Errorf("kernel forwarding: rules map: %w", err)
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "pbx_rtp_fwd", Type: ebpf.SchedCLS, License: "GPL", Instructions: program(m.FD()),
	})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("kernel forwarding: program: %w", err)
	}
	f := &Forwarder{rules: m, prog: p}
	var errs []error
	for _, name := range ifaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: p, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			errs = append(errs, fmt.Errorf("attach to %s: %w", name, err))
			continue
		}
		f.links = append(f.links, l)
		f.Interfaces = append(f.Interfaces, name)
	}
	f.Skipped = errors.Join(errs...)
	if len(f.links) == 0 {
		f.Close()
		return nil, fmt.Errorf("kernel forwarding: no interface: %w", f.Skipped)
	}
	return f, nil
}

func tuple(b []byte, src, dst netip.AddrPort) error {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return errors.New("kernel forwarding: IPv4 only")
	}
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[0:4], s[:])
	copy(b[4:8], d[:])
	binary.BigEndian.PutUint16(b[8:10], src.Port())
	binary.BigEndian.PutUint16(b[10:12], dst.Port())
	return nil
}

// Set installs or replaces the rule for k.
func (f *Forwarder) Set(k Key, r Rule) error {
	var key [12]byte
	var val [valueSize]byte
	if err := tuple(key[:], k.Src, k.Dst); err != nil {
		return err
	}
	if err := tuple(val[:12], r.Src, r.Dst); err != nil {
		return err
	}
	val[valEventPT] = 0xff
	if r.EventPT >= 0 && r.EventPT < 128 {
		val[valEventPT] = byte(r.EventPT)
	}
	ne := binary.NativeEndian
	ne.PutUint32(val[valExtMax:], r.Stream.ExtMax)
	ne.PutUint32(val[valReceived:], r.Stream.Received)
	binary.BigEndian.PutUint32(val[valSSRC:], r.Stream.SSRC)
	ne.PutUint32(val[valJitter:], r.Stream.Jitter16)
	ne.PutUint32(val[valIfindex:], uint32(r.Out))
	if r.ClockRate > 0 {
		ne.PutUint32(val[valNsPerTick:], uint32(1e9/r.ClockRate))
	}
	return f.rules.Put(key[:], val[:])
}

// Delete removes k's rule and returns its last counters, in one step: no
// packet the program forwards in between goes uncounted.
func (f *Forwarder) Delete(k Key) (Counters, error) {
	var key [12]byte
	var val [valueSize]byte
	if err := tuple(key[:], k.Src, k.Dst); err != nil {
		return Counters{}, err
	}
	if err := f.rules.LookupAndDelete(key[:], val[:]); err != nil {
		return Counters{}, err
	}
	return counters(&val), nil
}

// Counters reads k's counters.
func (f *Forwarder) Counters(k Key) (Counters, error) {
	var key [12]byte
	var val [valueSize]byte
	if err := tuple(key[:], k.Src, k.Dst); err != nil {
		return Counters{}, err
	}
	if err := f.rules.Lookup(key[:], val[:]); err != nil {
		return Counters{}, err
	}
	return counters(&val), nil
}

// counters decodes a rule's value.
func counters(val *[valueSize]byte) Counters {
	ne := binary.NativeEndian
	return Counters{
		Packets:   ne.Uint64(val[valPackets:]),
		Bytes:     ne.Uint64(val[valBytes:]),
		LastNanos: ne.Uint64(val[valLast:]),
		Stream: Stream{
			SSRC:     binary.BigEndian.Uint32(val[valSSRC:]),
			ExtMax:   ne.Uint32(val[valExtMax:]),
			Received: ne.Uint32(val[valReceived:]),
			Jitter16: ne.Uint32(val[valJitter:]),
		},
	}
}

// Close detaches the program and frees the rules.
func (f *Forwarder) Close() error {
	for _, l := range f.links {
		l.Close()
	}
	f.links = nil
	if f.prog != nil {
		f.prog.Close()
	}
	return f.rules.Close()
}

// Route returns how a datagram to dst leaves: out is 0 when dst is an
// address of this host, else the index of the interface the kernel would
// send it out of, which must be an Ethernet interface (the forwarded
// frame gets its link addresses from the neighbour table); src is the
// source address the kernel would give it.
func Route(dst netip.Addr) (out int, src netip.Addr, err error) {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return 0, src, fmt.Errorf("kernel forwarding: no route to %v: %w", dst, err)
	}
	src = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	c.Close()
	if dst.IsLoopback() {
		return 0, src, nil
	}
	ifcs, err := net.Interfaces()
	if err != nil {
		return 0, src, err
	}
	out = -1
	for _, ifc := range ifcs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			switch {
			case err != nil:
			case p.Addr().Unmap() == dst:
				return 0, src, nil
			case p.Addr().Unmap() == src && out < 0:
				if ifc.Flags&net.FlagLoopback != 0 {
					return 0, src, nil
				}
				if len(ifc.HardwareAddr) != 6 {
					return 0, src, fmt.Errorf("kernel forwarding: %s is not an Ethernet interface", ifc.Name)
				}
				out = ifc.Index
			}
		}
	}
	if out < 0 {
		return 0, src, fmt.Errorf("kernel forwarding: no interface has %v, the source toward %v", src, dst)
	}
	return out, src, nil
}

// Interfaces names the interfaces the program can take datagrams from:
// those up, loopback or Ethernet.
func Interfaces() ([]string, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagUp != 0 && (ifc.Flags&net.FlagLoopback != 0 || len(ifc.HardwareAddr) == 6) {
			names = append(names, ifc.Name)
		}
	}
	return names, nil
}

// KernelHasTCX reports whether the running kernel is one that attaches
// tcx programs (6.6 or later), the only way New attaches.
func KernelHasTCX() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 6 || major == 6 && minor >= 6
}
