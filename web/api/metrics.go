package api

import (
	"context"
	"net/http"
)

// Histogram is a histogram's state for the metrics: cumulative counts by
// upper bound (seconds), the total count and the sum.
type Histogram struct {
	Buckets map[float64]uint64
	Count   uint64
	Sum     float64
}

// MediaTotals are the relay's counters since the process started.
type MediaTotals struct {
	Legs        uint64
	PacketsIn   uint64
	PacketsOut  uint64
	BytesIn     uint64
	BytesOut    uint64
	PacketsLost uint64
	Strays      uint64
	Jitter      Histogram // of closed legs that received audio
	// Ports of the RTP range: handed out, resting after release, free; and
	// allocations refused because none could be bound.
	PortsInUse, PortsResting, PortsFree int
	PortsExhausted                      uint64
	// Kernel forwarding (media.kernelForwarding): directions of calls
	// forwarded in the kernel now, and moved there since the start.
	KernelDirections int
	KernelMoves      uint64
}

// MediaSource reads the media relay's counters.
type MediaSource interface {
	Media(ctx context.Context) (MediaTotals, error)
}

// SIPStats are the SIP stack's transport counters: what it refused and
// dropped before a handler saw it, and its connections.
type SIPStats struct {
	OpenTransactions int
	UDPSources       int // per-source entries kept for UDP (bounded)
	// Refused counts requests answered with an error by reason
	// (over_cap: 503, version: 505, too_large: 513); Dropped counts what was
	// not answered (bad_version, too_large, malformed, queue_full).
	Refused, Dropped map[string]uint64
	TCPOpen          int
	TCPAccepted      uint64
	TCPAcceptErrors  uint64
	// TCPRefused counts connections closed on accept (total, per_source);
	// TCPClosed those closed later (idle, incomplete, oversize, malformed,
	// throttled).
	TCPRefused, TCPClosed map[string]uint64
}

// SIPSource reads the SIP stack's counters.
type SIPSource interface {
	SIP(ctx context.Context) (SIPStats, error)
}

// CallLogStats are the call record writer's counters.
type CallLogStats struct {
	Commits    uint64
	CommitTime Histogram // write, fsync and rename of one record
	// MarkerTime and RecordTime are what a call waits for the disk: the
	// in-flight marker written before its answer, the record file written
	// as it ends.
	MarkerTime, RecordTime Histogram
	Pending                int // records waiting for the disk
}

// CallLogStatsSource reads the call record writer's counters.
type CallLogStatsSource interface {
	CallLogStats(ctx context.Context) (CallLogStats, error)
}

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, _ Query) error {
	if h.metricsHandler == nil {
		return NotRunning("metrics")
	}
	h.metricsHandler.ServeHTTP(w, r)
	return nil
}

// WebhookStats are the webhook dispatcher's counters since start.
type WebhookStats struct {
	// Deliveries counts finished deliveries by event and outcome
	// (delivered, expired).
	Deliveries map[[2]string]uint64 // [event, outcome]
	// Attempts counts delivery attempts by result (ok, error, status).
	Attempts map[string]uint64
	// Queued is the deliveries waiting or in flight.
	Queued int
	// InFlight is the attempts running now.
	InFlight int
	// Latency is the time of each attempt, request to response.
	Latency Histogram
}

// WebhookStatsSource reads the webhook dispatcher's counters.
type WebhookStatsSource interface {
	WebhookStats(ctx context.Context) (WebhookStats, error)
}
