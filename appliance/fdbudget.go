package appliance

import (
	"log/slog"
	"math"
	"pbx/appliance/cdr"
	"syscall"
)

// mediaPortBudget bounds the legs with media at once (rtpcore's MaxPorts)
// so that the RTP sockets, two a leg (RTP and RTCP), leave descriptors for
// the files the process opens: call records, recordings, the database, the
// API's connections. Without it, a call ladder past the machine's capacity
// piled up legs until the RTP sockets held every descriptor of the open
// file limit, and the call records were kept in memory ("call records
// cannot be written": too many open files).
//
// The rest keeps a sixteenth of the limit, at least 1,024 but never more
// than half of it. SIP over TCP is not counted: its listener rides out
// EMFILE (it waits and accepts again), and its cap (sip.tcp.maxConnections)
// is sized against the limit by the operator. It returns 0 (no bound beyond
// the port range) when the limit is unknown or unlimited.
func mediaPortBudget(nofile uint64) int {
	if nofile == 0 || nofile > math.MaxInt32 {
		return 0
	}
	n := int(nofile)
	return max((n-fileReserve(n))/2, 1)
}

// fileReserve is what the RTP sockets leave of an open file limit of n.
func fileReserve(n int) int { return min(max(1024, n/16), n/2) }

// recordFileBudget bounds the marker files the call records keep open
// between calls (cdr's MaxOpenFiles): a quarter of what the RTP sockets
// leave, half once that is at least 1,024, so that with every port in use
// the held markers still leave descriptors (at least 512 then) for the
// records' own writes (the stock of new spares, up to 256 a tenant
// taking calls), recordings, the database and the API. A marker file held
// spares an open and a close by path an answered call (about 10 us of
// the records' cost at 500 calls/s): 1-second calls at 500/s keep about
// 500 markers in flight, which the quarter of 1,250 an open file limit
// of 20,000 leaves did not cover. It returns 0 (cdr's default) when the
// limit is unknown or unlimited, and -1 (none held) when the share is
// under 16.
func recordFileBudget(nofile uint64) int {
	if nofile == 0 || nofile > math.MaxInt32 {
		return 0
	}
	r := fileReserve(int(nofile))
	q := r / 4
	if r >= 1024 {
		q = r / 2
	}
	if q >= 16 {
		return min(q, cdr.DefaultMaxOpenFiles)
	}
	return -1
}

// openFileLimit is the process's open file limit (RLIMIT_NOFILE, the soft
// one, which the Go runtime raises to the hard one at start), 0 if unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}

// boundMediaPorts returns the bound for rtpcore's MaxPorts, and logs when
// it is below what the port range holds: then the open file limit, not the
// range, caps the calls with media at once.
func boundMediaPorts(portMin, portMax int, log *slog.Logger) int {
	nofile := openFileLimit()
	budget := mediaPortBudget(nofile)
	if budget > 0 && portMin > 0 && budget < (portMax-portMin+1)/2 {
		log.Warn("rtp ports bounded by the open file limit (RLIMIT_NOFILE): raise LimitNOFILE to use the whole range",
			"open_file_limit", nofile, "legs_at_once", budget, "rtp_port_min", portMin, "rtp_port_max", portMax)
	}
	return budget
}
