package kfwd

import (
	"github.com/cilium/ebpf/asm"
)

// The program's stack: the datagram's IPv4 header (20 bytes, no options),
// UDP header (8) and RTP header (12) are loaded to fp-40; the values to
// store once it is forwarded lie below them.
const (
	stkIP    = -40
	stkKey   = stkIP + 12 // source and destination address, then ports: the rule's key
	stkUDP   = stkIP + 20
	stkRTP   = stkIP + 28
	stkSeq   = stkIP - 8 // u32: the extended highest sequence number to store
	stkRecv  = stkIP - 4 // u32: the packets received to store
	headLen  = 40
	ethLen   = 14
	offIPv4  = ethLen
	offUDPck = ethLen + 20 + 6
)

// The rule's value, see Rule and ruleValue.
const (
	valNew       = 0  // [12]byte: the new addresses and ports, as in the packet
	valEventPT   = 12 // u8: telephone-event payload type left to the relay; 0xff none
	valPackets   = 16 // u64
	valBytes     = 24 // u64: RTP bytes (UDP payload)
	valLast      = 32 // u64: CLOCK_MONOTONIC ns of the last packet
	valExtMax    = 40 // u32: highest sequence number, extended by its cycles
	valReceived  = 44 // u32: packets of the stream
	valSSRC      = 48 // u32, as in the packet
	valJitter    = 52 // u32: RFC 3550 interarrival jitter, clock units × 16
	valTransit   = 56 // u32: the last packet's transit, clock units
	valNsPerTick = 60 // u32: 1e9 / clock rate; 0: no jitter
	valHasTrans  = 64 // u32: transit set
	valIfindex   = 68 // u32: the interface to send out of; 0: a local destination
	valueSize    = 72
)

// Return codes of a tcx program, and the kernel's constants it uses.
const (
	tcxNext       = -1 // not forwarded: the next program, then the stack (the relay's socket)
	tcxPass       = 0  // rewritten to a local address: up the stack to it
	fPseudoHdr    = 0x10
	fMarkMangled0 = 0x20
	loIfindex     = 1
	fIngress      = 1 // BPF_F_INGRESS
	maxDropout    = 3000
	maxMisorder   = 100
)

// program returns the forwarding program for the rules map whose
// descriptor is rules. A datagram is forwarded when it is IPv4 UDP, its
// source and destination have a rule, it is RTP of the stream the rule
// expects (same SSRC, sequence number in order or a little late or
// early), not RTCP and not a telephone event, and a route leads to its new
// destination. Everything else goes to the relay's socket, which takes
// the leg back (see the rtpcore package).
func program(rules int) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R0, asm.R6, 16, asm.Word),  // skb->protocol
		asm.JNE.Imm(asm.R0, 0x0008, "next"),        // ETH_P_IP, big-endian
		asm.LoadMem(asm.R0, asm.R6, 176, asm.Word), // skb->gso_size: one datagram, not a GRO train
		asm.JNE.Imm(asm.R0, 0, "next"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, offIPv4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stkIP),
		asm.Mov.Imm(asm.R4, headLen),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "next"),
		asm.LoadMem(asm.R0, asm.RFP, stkIP, asm.Byte),
		asm.JNE.Imm(asm.R0, 0x45, "next"), // version 4, no options
		asm.LoadMem(asm.R0, asm.RFP, stkIP+9, asm.Byte),
		asm.JNE.Imm(asm.R0, 17, "next"), // UDP
		asm.LoadMem(asm.R0, asm.RFP, stkIP+6, asm.Half),
		asm.And.Imm(asm.R0, 0xff3f), // more fragments, offset (big-endian, loaded little)
		asm.JNE.Imm(asm.R0, 0, "next"),

		// The rule for this source and destination, else for this source
		// and any destination address (a relay bound to 0.0.0.0).
		asm.LoadMapPtr(asm.R1, rules),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stkKey),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "found"),
		asm.LoadMem(asm.R8, asm.RFP, stkKey+4, asm.Word),
		asm.StoreImm(asm.RFP, stkKey+4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, rules),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stkKey),
		asm.FnMapLookupElem.Call(),
		asm.StoreMem(asm.RFP, stkKey+4, asm.R8, asm.Word),
		asm.JEq.Imm(asm.R0, 0, "next"),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("found"),

		// RTP version 2 of the expected stream; RTCP multiplexed on the
		// port and telephone events go to the relay.
		asm.LoadMem(asm.R1, asm.RFP, stkRTP, asm.Byte),
		asm.And.Imm(asm.R1, 0xc0),
		asm.JNE.Imm(asm.R1, 0x80, "next"),
		asm.LoadMem(asm.R1, asm.RFP, stkRTP+1, asm.Byte),
		asm.And.Imm(asm.R1, 0x7f),
		asm.JLT.Imm(asm.R1, 72, "media"),
		asm.JLT.Imm(asm.R1, 77, "next"),
		asm.LoadMem(asm.R2, asm.R7, valEventPT, asm.Byte).WithSymbol("media"),
		asm.JEq.Reg(asm.R1, asm.R2, "next"),
		asm.LoadMem(asm.R2, asm.RFP, stkRTP+8, asm.Word),
		asm.LoadMem(asm.R3, asm.R7, valSSRC, asm.Word),
		asm.JNE.Reg(asm.R2, asm.R3, "next"),
	}
	insns = append(insns, sequence()...)
	insns = append(insns, rewrite()...)
	insns = append(insns, account()...)
	return append(insns, deliver()...)
}

// sequence checks the sequence number against the stream's (RFC 3550
// A.1) and counts the packet: a jump beyond the dropout window goes to
// the relay, whose statistics start a new stream. The values to store once
// the datagram is forwarded wait on the stack.
func sequence() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, stkRTP+2, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half), // seq
		asm.LoadMem(asm.R8, asm.R7, valExtMax, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R8),
		asm.And.Imm(asm.R2, 0xffff), // max seq
		asm.Mov.Reg(asm.R3, asm.R1),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.And.Imm(asm.R3, 0xffff), // delta
		asm.JEq.Imm(asm.R3, 0, "counted"),
		asm.JGE.Imm(asm.R3, maxDropout, "notahead"),
		asm.JGE.Reg(asm.R1, asm.R2, "nowrap"),
		asm.Add.Imm(asm.R8, 0x10000),
		asm.And.Imm(asm.R8, -0x10000).WithSymbol("nowrap"), // keep the cycles (32-bit value)
		asm.Or.Reg(asm.R8, asm.R1),
		asm.Ja.Label("counted"),
		asm.JLE.Imm(asm.R3, 0x10000-maxMisorder, "next").WithSymbol("notahead"),
		asm.LoadMem(asm.R9, asm.R7, valReceived, asm.Word).WithSymbol("counted"),
		asm.Add.Imm(asm.R9, 1),
		asm.StoreMem(asm.RFP, stkSeq, asm.R8, asm.Word),
		asm.StoreMem(asm.RFP, stkRecv, asm.R9, asm.Word),
	}
}

// rewrite writes the new addresses and ports with both checksums.
func rewrite() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stkKey),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.Mov.Imm(asm.R4, 8),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnCsumDiff.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, offIPv4+10),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Reg(asm.R4, asm.R8),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnL3CsumReplace.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, offUDPck),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Reg(asm.R4, asm.R8),
		asm.Mov.Imm(asm.R5, fPseudoHdr|fMarkMangled0),
		asm.FnL4CsumReplace.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stkKey+8),
		asm.Mov.Imm(asm.R2, 4),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, valNew+8),
		asm.Mov.Imm(asm.R4, 4),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnCsumDiff.Call(),
		asm.Mov.Reg(asm.R4, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, offUDPck),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R5, fMarkMangled0),
		asm.FnL4CsumReplace.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, offIPv4+12),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.Mov.Imm(asm.R4, 12),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnSkbStoreBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
	}
}

// account counts the packet and updates the stream's sequence and jitter.
func account() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, stkSeq, asm.Word),
		asm.StoreMem(asm.R7, valExtMax, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stkRecv, asm.Word),
		asm.StoreMem(asm.R7, valReceived, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, valPackets),
		asm.LoadMem(asm.R1, asm.RFP, stkUDP+4, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.Add.Imm(asm.R1, -8),
		asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, valBytes),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R7, valLast, asm.R0, asm.DWord),
		// Jitter (RFC 3550 A.8) for static payload types.
		asm.LoadMem(asm.R1, asm.RFP, stkRTP+1, asm.Byte),
		asm.And.Imm(asm.R1, 0x7f),
		asm.JGE.Imm(asm.R1, 96, "accounted"),
		asm.LoadMem(asm.R1, asm.R7, valNsPerTick, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "accounted"),
		asm.Div.Reg(asm.R0, asm.R1), // arrival, clock units
		asm.LoadMem(asm.R1, asm.RFP, stkRTP+4, asm.Word),
		asm.HostTo(asm.BE, asm.R1, asm.Word),
		asm.Sub.Reg32(asm.R0, asm.R1), // transit, 32-bit
		asm.LoadMem(asm.R2, asm.R7, valTransit, asm.Word),
		asm.StoreMem(asm.R7, valTransit, asm.R0, asm.Word),
		asm.LoadMem(asm.R3, asm.R7, valHasTrans, asm.Word),
		asm.StoreImm(asm.R7, valHasTrans, 1, asm.Word),
		asm.JEq.Imm(asm.R3, 0, "accounted"),
		asm.Sub.Reg32(asm.R0, asm.R2), // D, 32-bit
		asm.JSGE.Imm32(asm.R0, 0, "positive"),
		asm.Neg.Imm32(asm.R0, 0),
		asm.LoadMem(asm.R1, asm.R7, valJitter, asm.Word).WithSymbol("positive"),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 8),
		asm.RSh.Imm(asm.R2, 4),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.Add.Reg(asm.R1, asm.R0), // J += |D| - (J+8)/16
		asm.StoreMem(asm.R7, valJitter, asm.R1, asm.Word),
	}
}

// deliver sends the rewritten datagram on: out of the interface the
// relay chose for its destination, the kernel resolving the next hop and
// its link address, or, for a local destination, up the loopback
// interface's stack.
func deliver() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.R7, valIfindex, asm.Word).WithSymbol("accounted"),
		asm.JEq.Imm(asm.R1, 0, "local"),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRedirectNeigh.Call(),
		asm.Return(),
		asm.LoadMem(asm.R1, asm.R6, 40, asm.Word).WithSymbol("local"), // skb->ifindex
		asm.JEq.Imm(asm.R1, loIfindex, "pass"),
		asm.Mov.Imm(asm.R1, loIfindex),
		asm.Mov.Imm(asm.R2, fIngress),
		asm.FnRedirect.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxPass).WithSymbol("pass"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("drop"), // TCX_DROP: written halfway
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("next"),
		asm.Return(),
	}
}
