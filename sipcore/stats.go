package sipcore

import (
	"sync/atomic"
	"time"
)

// overloadLogEvery spaces the warnings about requests refused past the
// transaction cap.
const overloadLogEvery = time.Minute

// Stats are the SIP core's sizes and load-shedding counters.
type Stats struct {
	// OpenTransactions is the number of server transactions open (handed
	// to a handler and not yet terminated); it stays under
	// Options.MaxServerTransactions.
	OpenTransactions int
	// UDPPoolEntries is the number of addresses in sipgo's UDP connection
	// pool: the listening sockets plus the sources it remembers, bounded
	// whatever the number of sources.
	UDPPoolEntries int

	RefusedOverCap    uint64 // requests answered 503 past the transaction cap
	VersionRejected   uint64 // requests answered 505 (SIP version not 2.0)
	BadVersionDropped uint64 // other-version messages too broken to answer, or responses
	TooLarge          uint64 // UDP requests answered 513
	TooLargeDropped   uint64 // UDP datagrams over the limit that could not be answered
	StatelessOptions  uint64 // out-of-dialog OPTIONS answered without a transaction
	StrayBye          uint64 // BYEs of no dialog answered 481 without a transaction
	// StatelessRegister counts responses to REGISTERs over UDP, sent
	// without a transaction; RegisterRetransmissions the retransmitted
	// REGISTERs answered from (or absorbed by) the cache; CachedRegisters
	// is the number of answers cached now (bounded like the transactions
	// by Options.MaxServerTransactions).
	StatelessRegister       uint64
	RegisterRetransmissions uint64
	CachedRegisters         int
	MalformedDropped        uint64 // datagrams the UDP readers parsed and found unusable
	QueueDropped            uint64 // UDP datagrams dropped because the stack was behind
	ReadErrors              uint64 // UDP read errors other than the socket closing
}

// counters backs Stats.
type counters struct {
	refusedOverCap, versionRejected, badVersionDropped atomic.Uint64
	tooLarge, tooLargeDropped, statelessOptions        atomic.Uint64
	malformedDropped, queueDropped, readErrors         atomic.Uint64
	statelessRegister, registerRetransmissions         atomic.Uint64
	strayBye                                           atomic.Uint64
	overloadLogged                                     atomic.Int64 // unix ns of the last warning
}

// noteOverload logs, at most once per overloadLogEvery, that requests are
// being refused past the transaction cap.
func (s *Server) noteOverload() {
	now := time.Now().UnixNano()
	last := s.stats.overloadLogged.Load()
	if now-last < int64(overloadLogEvery) || !s.stats.overloadLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("sip overload: new requests refused with 503 past the transaction cap",
		"open", s.txs.count(), "cap", s.txs.max, "refused_total", s.stats.refusedOverCap.Load())
}

// Stats returns the current sizes and counters.
func (s *Server) Stats() Stats {
	st := Stats{
		OpenTransactions:        s.txs.count(),
		RefusedOverCap:          s.stats.refusedOverCap.Load(),
		VersionRejected:         s.stats.versionRejected.Load(),
		BadVersionDropped:       s.stats.badVersionDropped.Load(),
		TooLarge:                s.stats.tooLarge.Load(),
		TooLargeDropped:         s.stats.tooLargeDropped.Load(),
		StatelessOptions:        s.stats.statelessOptions.Load(),
		StrayBye:                s.stats.strayBye.Load(),
		StatelessRegister:       s.stats.statelessRegister.Load(),
		CachedRegisters:         s.registers.size(),
		RegisterRetransmissions: s.stats.registerRetransmissions.Load(),
		MalformedDropped:        s.stats.malformedDropped.Load(),
		QueueDropped:            s.stats.queueDropped.Load(),
		ReadErrors:              s.stats.readErrors.Load(),
	}
	if pool := s.ua.TransportLayer().Pool(TransportUDP); pool != nil {
		st.UDPPoolEntries = pool.Size()
	}
	return st
}
