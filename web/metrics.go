package web

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pbx/appliance/events"
	"pbx/web/api"
)

// scrapeTimeout bounds how long the collectors read the components.
const scrapeTimeout = 5 * time.Second

// setupBuckets are the call setup time buckets: from the INVITE to the
// answer, so they run from a quick pickup to a long ring.
var setupBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60}

// metrics is the process's Prometheus registry: state read from the
// components at each scrape, counters kept from the event bus and the API
// middleware, and the Go runtime and process collectors. No label carries a
// number, an address, a tenant or another unbounded value.
type metrics struct {
	reg      *prometheus.Registry
	b        api.Backends
	requests *prometheus.CounterVec
	ended    *prometheus.CounterVec
	setup    prometheus.Histogram
	dropped  prometheus.Counter
	sub      *events.Subscription // calls, from the event bus; nil without one
}

func newMetrics(b api.Backends) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), b: b}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pbx_api_requests_total", Help: "Management API requests by route pattern and status code.",
	}, []string{"route", "code"})
	m.ended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pbx_calls_total", Help: "Calls ended, by direction and cause.",
	}, []string{"direction", "cause"})
	m.setup = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pbx_call_setup_seconds", Help: "Time from a call's INVITE to its answer.", Buckets: setupBuckets,
	})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbx_metrics_events_dropped_total", Help: "Call events the metrics lost to a full queue (their counts are low by as many).",
	})
	if b.Events != nil {
		// Subscribed now, so no call is missed before the server runs.
		m.sub = b.Events.Subscribe(4096, func(e events.Event) bool {
			return e.Type == events.CallAnswered || e.Type == events.CallEnded
		})
	}
	m.reg.MustRegister(m.requests, m.ended, m.setup, m.dropped, stateCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe counts an API request once it is answered.
func (m *metrics) observe(r *http.Request, code int) {
	route := "unmatched"
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		route = rc.RoutePattern()
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// follow counts calls from the event bus until ctx ends.
func (m *metrics) follow(ctx context.Context) {
	sub := m.sub
	if sub == nil {
		return
	}
	defer sub.Close()
	// A call between tenants is published once for each tenant's side:
	// count it once.
	var recent [64]string
	next := 0
	seen := func(id string) bool {
		for _, r := range recent {
			if r == id {
				return true
			}
		}
		recent[next] = id
		next = (next + 1) % len(recent)
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-sub.C:
			if e.Type == events.Resync {
				m.dropped.Add(float64(dropped(e)))
				continue
			}
			c, ok := e.Data.(api.Call)
			if !ok {
				continue
			}
			if seen(string(e.Type) + " " + c.ID) {
				continue
			}
			switch e.Type {
			case events.CallAnswered:
				if c.AnsweredAt != nil {
					m.setup.Observe(c.AnsweredAt.Sub(c.StartedAt).Seconds())
				}
			case events.CallEnded:
				m.ended.WithLabelValues(string(c.Direction), string(c.Cause)).Inc()
			}
		}
	}
}

func dropped(e events.Event) uint64 {
	d, _ := e.Data.(map[string]uint64)
	return d["dropped"]
}

// stateCollector reads the components at each scrape.
type stateCollector struct{ m *metrics }

var (
	descCallsActive = prometheus.NewDesc("pbx_calls_active", "Calls in progress, by direction.", []string{"direction"}, nil)
	descRegs        = prometheus.NewDesc("pbx_registrations", "Live registrations (contacts bound).", nil, nil)
	descTrunks      = prometheus.NewDesc("pbx_trunks", "Trunks by state: up (registered, or not registering) or down.", []string{"state"}, nil)
	descGuardPkts   = prometheus.NewDesc("pbx_guard_packets_total", "SIP packets the security guard saw.", nil, nil)
	descGuardDrops  = prometheus.NewDesc("pbx_guard_dropped_total", "SIP packets the guard dropped, by reason.", []string{"reason"}, nil)
	descGuardAuth   = prometheus.NewDesc("pbx_guard_auth_failures_total", "Authentication failures the guard was told of.", nil, nil)
	descGuardBans   = prometheus.NewDesc("pbx_guard_bans_total", "Bans the guard imposed.", nil, nil)
	descGuardActive = prometheus.NewDesc("pbx_guard_bans_active", "Sources banned now.", nil, nil)
	descGuardTrack  = prometheus.NewDesc("pbx_guard_tracked_sources", "Source addresses the guard tracks.", nil, nil)
	descRTPPkts     = prometheus.NewDesc("pbx_rtp_packets_total", "RTP packets relayed, by direction as the far ends see it.", []string{"direction"}, nil)
	descRTPBytes    = prometheus.NewDesc("pbx_rtp_bytes_total", "RTP bytes relayed, by direction.", []string{"direction"}, nil)
	descRTPLost     = prometheus.NewDesc("pbx_rtp_packets_lost_total", "RTP packets lost before reaching the PBX (sequence gaps).", nil, nil)
	descRTPLegs     = prometheus.NewDesc("pbx_rtp_legs_total", "Media legs opened.", nil, nil)
	descRTPStrays   = prometheus.NewDesc("pbx_rtp_stray_packets_total", "Packets from other sources than a leg's latched one, dropped.", nil, nil)
	descRTPPorts    = prometheus.NewDesc("pbx_rtp_ports", "RTP port pairs of the range by state: in_use, resting (after release), free.", []string{"state"}, nil)
	descRTPExhaust  = prometheus.NewDesc("pbx_rtp_ports_exhausted_total", "Media legs refused because no RTP port could be bound (the call got 503).", nil, nil)
	descRTPJitter   = prometheus.NewDesc("pbx_rtp_jitter_seconds", "Interarrival jitter of each closed media leg that received audio.", nil, nil)
	descRTPKernel   = prometheus.NewDesc("pbx_rtp_kernel_directions", "Directions of calls' media forwarded in the kernel now (media.kernelForwarding).", nil, nil)
	descRTPKMoves   = prometheus.NewDesc("pbx_rtp_kernel_moves_total", "Directions of calls' media moved into the kernel (media.kernelForwarding).", nil, nil)
	descSIPTx       = prometheus.NewDesc("pbx_sip_transactions_open", "SIP server transactions open (capped; past the cap requests get 503).", nil, nil)
	descSIPSources  = prometheus.NewDesc("pbx_sip_udp_sources", "Per-source entries the SIP stack keeps for UDP (bounded whatever the number of sources).", nil, nil)
	descSIPRefused  = prometheus.NewDesc("pbx_sip_refused_total", "SIP requests refused before a handler, by reason (over_cap 503, version 505, too_large 513).", []string{"reason"}, nil)
	descSIPDropped  = prometheus.NewDesc("pbx_sip_dropped_total", "SIP datagrams dropped unanswered before a handler, by reason.", []string{"reason"}, nil)
	descTCPOpen     = prometheus.NewDesc("pbx_sip_tcp_connections", "SIP TCP connections open.", nil, nil)
	descTCPAccepted = prometheus.NewDesc("pbx_sip_tcp_accepted_total", "SIP TCP connections accepted within the caps.", nil, nil)
	descTCPAccErr   = prometheus.NewDesc("pbx_sip_tcp_accept_errors_total", "Failed accepts (EMFILE and the like), each retried after a pause.", nil, nil)
	descTCPRefused  = prometheus.NewDesc("pbx_sip_tcp_refused_total", "SIP TCP connections closed on accept, by cap (total, per_source).", []string{"reason"}, nil)
	descTCPClosed   = prometheus.NewDesc("pbx_sip_tcp_closed_total", "SIP TCP connections the PBX closed, by reason.", []string{"reason"}, nil)
	descUpJobs      = prometheus.NewDesc("pbx_upload_queue_jobs", "Recording uploads waiting or running.", nil, nil)
	descUpAge       = prometheus.NewDesc("pbx_upload_oldest_job_age_seconds", "Age of the oldest recording upload waiting.", nil, nil)
	descUpFailed    = prometheus.NewDesc("pbx_upload_failed_total", "Recording uploads given up (moved to uploads/failed) since the start.", nil, nil)
	descCDRCommits  = prometheus.NewDesc("pbx_cdr_commits_total", "Call records committed to disk.", nil, nil)
	descCDRSeconds  = prometheus.NewDesc("pbx_cdr_commit_seconds", "Time to write, fsync and rename one call record.", nil, nil)
	descCDRWait     = prometheus.NewDesc("pbx_cdr_call_wait_seconds", "Time a call waits for the disk: the in-flight marker before the answer (step=marker), the record file as the call ends (step=record).", []string{"step"}, nil)
	descCDRPending  = prometheus.NewDesc("pbx_cdr_pending", "Call records waiting to be written (a full or failing disk).", nil, nil)
	descHookDeliv   = prometheus.NewDesc("pbx_webhook_deliveries_total", "Webhook deliveries settled, by event and outcome (delivered, expired, dropped).", []string{"event", "outcome"}, nil)
	descHookTries   = prometheus.NewDesc("pbx_webhook_attempts_total", "Webhook delivery attempts by result (ok: 2xx, status: another answer, error: none).", []string{"result"}, nil)
	descHookQueue   = prometheus.NewDesc("pbx_webhook_queue_depth", "Webhook deliveries held: waiting, backing off or in flight.", nil, nil)
	descHookFlight  = prometheus.NewDesc("pbx_webhook_in_flight", "Webhook delivery attempts running (at most webhooks.concurrency).", nil, nil)
	descHookSeconds = prometheus.NewDesc("pbx_webhook_attempt_seconds", "Time of each webhook delivery attempt, request to answer or error.", nil, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCallsActive, descRegs, descTrunks, descGuardPkts, descGuardDrops, descGuardAuth,
		descGuardBans, descGuardActive, descGuardTrack, descRTPPkts, descRTPBytes, descRTPLost, descRTPLegs, descRTPStrays,
		descRTPPorts, descRTPExhaust, descRTPJitter, descRTPKernel, descRTPKMoves, descSIPTx, descSIPSources, descSIPRefused, descSIPDropped,
		descTCPOpen, descTCPAccepted, descTCPAccErr, descTCPRefused, descTCPClosed, descUpJobs, descUpAge, descUpFailed, descCDRCommits, descCDRSeconds, descCDRWait, descCDRPending,
		descHookDeliv, descHookTries, descHookQueue, descHookFlight, descHookSeconds} {
		ch <- d
	}
}

// Collect reads each component the server was given and sends its metrics;
// a component that does not answer within scrapeTimeout is left out.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	b, e := c.m.b, emitter(ch)
	if b.Calls != nil {
		e.calls(ctx, b.Calls)
	}
	if b.Registrations != nil {
		e.registrations(ctx, b.Registrations)
	}
	if b.Trunks != nil {
		e.trunks(ctx, b.Trunks)
	}
	if b.Guard != nil {
		e.guard(ctx, b.Guard)
	}
	if b.Media != nil {
		e.media(ctx, b.Media)
	}
	if b.SIP != nil {
		e.sip(ctx, b.SIP)
	}
	if b.Status != nil {
		e.uploads(ctx, b.Status)
	}
	if b.CallLogStats != nil {
		e.callLog(ctx, b.CallLogStats)
	}
	if b.Webhooks != nil {
		e.webhooks(ctx, b.Webhooks)
	}
}

// emitter sends constant metrics on a scrape's channel.
type emitter chan<- prometheus.Metric

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (e emitter) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// calls sends the calls in progress by direction, an inter-tenant call
// counted once.
func (e emitter) calls(ctx context.Context, src api.CallSource) {
	calls, err := src.Calls(ctx)
	if err != nil {
		return
	}
	by := map[string]int{"inbound": 0, "outbound": 0, "internal": 0}
	seen := map[string]bool{}
	for _, call := range calls {
		if !seen[call.ID] { // an inter-tenant call is listed once per tenant
			seen[call.ID] = true
			by[string(call.Direction)]++
		}
	}
	for dir, n := range by {
		e.gauge(descCallsActive, float64(n), dir)
	}
}

// registrations sends the number of registrations online.
func (e emitter) registrations(ctx context.Context, src api.RegistrationSource) {
	regs, err := src.Registrations(ctx)
	if err != nil {
		return
	}
	n, now := 0, time.Now()
	for _, r := range regs {
		if r.Online(now) {
			n++
		}
	}
	e.gauge(descRegs, float64(n))
}

// trunks sends the trunks up (registered, or not registering) and down.
func (e emitter) trunks(ctx context.Context, src api.TrunkSource) {
	ts, err := src.Trunks(ctx)
	if err != nil {
		return
	}
	up, down := 0, 0
	for _, t := range ts {
		if !t.Registration.Enabled || t.Registration.State == "registered" {
			up++
		} else {
			down++
		}
	}
	e.gauge(descTrunks, float64(up), "up")
	e.gauge(descTrunks, float64(down), "down")
}

// guard sends the guard's counters.
func (e emitter) guard(ctx context.Context, src api.Guard) {
	g, err := src.Counters(ctx)
	if err != nil {
		return
	}
	e.counter(descGuardPkts, g.Packets)
	e.counter(descGuardDrops, g.Denied, "denied")
	e.counter(descGuardDrops, g.RateLimited, "rate_limited")
	e.counter(descGuardDrops, g.Banned, "banned")
	e.counter(descGuardDrops, g.Oversize, "oversize")
	e.counter(descGuardAuth, g.AuthFailure)
	e.counter(descGuardBans, g.BansIssued)
	e.gauge(descGuardActive, float64(g.BansActive))
	e.gauge(descGuardTrack, float64(g.Tracked))
}

// media sends the RTP relay's counters, port states and jitter.
func (e emitter) media(ctx context.Context, src api.MediaSource) {
	t, err := src.Media(ctx)
	if err != nil {
		return
	}
	e.counter(descRTPPkts, t.PacketsIn, "in")
	e.counter(descRTPPkts, t.PacketsOut, "out")
	e.counter(descRTPBytes, t.BytesIn, "in")
	e.counter(descRTPBytes, t.BytesOut, "out")
	e.counter(descRTPLost, t.PacketsLost)
	e.counter(descRTPLegs, t.Legs)
	e.counter(descRTPStrays, t.Strays)
	e.gauge(descRTPPorts, float64(t.PortsInUse), "in_use")
	e.gauge(descRTPPorts, float64(t.PortsResting), "resting")
	e.gauge(descRTPPorts, float64(t.PortsFree), "free")
	e.gauge(descRTPKernel, float64(t.KernelDirections))
	e.counter(descRTPKMoves, t.KernelMoves)
	e.counter(descRTPExhaust, t.PortsExhausted)
	e <- prometheus.MustNewConstHistogram(descRTPJitter, t.Jitter.Count, t.Jitter.Sum, t.Jitter.Buckets)
}

// sip sends the SIP stack's transactions, sources, TCP connections and
// refusals by reason.
func (e emitter) sip(ctx context.Context, src api.SIPSource) {
	s, err := src.SIP(ctx)
	if err != nil {
		return
	}
	e.gauge(descSIPTx, float64(s.OpenTransactions))
	e.gauge(descSIPSources, float64(s.UDPSources))
	e.gauge(descTCPOpen, float64(s.TCPOpen))
	e.counter(descTCPAccepted, s.TCPAccepted)
	e.counter(descTCPAccErr, s.TCPAcceptErrors)
	for _, v := range []struct {
		d *prometheus.Desc
		m map[string]uint64
	}{{descSIPRefused, s.Refused}, {descSIPDropped, s.Dropped}, {descTCPRefused, s.TCPRefused}, {descTCPClosed, s.TCPClosed}} {
		for reason, n := range v.m {
			e.counter(v.d, n, reason)
		}
	}
}

// uploads sends the recording upload queue, when the status has one.
func (e emitter) uploads(ctx context.Context, src api.StatusSource) {
	snap, err := src.Status(ctx)
	if err != nil || snap.Uploads == nil {
		return
	}
	e.gauge(descUpJobs, float64(snap.Uploads.Pending))
	e.gauge(descUpAge, float64(snap.Uploads.OldestAgeS))
	e.counter(descUpFailed, uint64(snap.Uploads.Failed))
}

// callLog sends the call record commits, their time and the backlog.
func (e emitter) callLog(ctx context.Context, src api.CallLogStatsSource) {
	s, err := src.CallLogStats(ctx)
	if err != nil {
		return
	}
	e.counter(descCDRCommits, s.Commits)
	e <- prometheus.MustNewConstHistogram(descCDRSeconds, s.CommitTime.Count, s.CommitTime.Sum, s.CommitTime.Buckets)
	e <- prometheus.MustNewConstHistogram(descCDRWait, s.MarkerTime.Count, s.MarkerTime.Sum, s.MarkerTime.Buckets, "marker")
	e <- prometheus.MustNewConstHistogram(descCDRWait, s.RecordTime.Count, s.RecordTime.Sum, s.RecordTime.Buckets, "record")
	e.gauge(descCDRPending, float64(s.Pending))
}

// webhooks sends the webhook deliveries, attempts, queue and attempt time.
func (e emitter) webhooks(ctx context.Context, src api.WebhookStatsSource) {
	s, err := src.WebhookStats(ctx)
	if err != nil {
		return
	}
	for k, n := range s.Deliveries {
		e.counter(descHookDeliv, n, k[0], k[1])
	}
	for r, n := range s.Attempts {
		e.counter(descHookTries, n, r)
	}
	e.gauge(descHookQueue, float64(s.Queued))
	e.gauge(descHookFlight, float64(s.InFlight))
	e <- prometheus.MustNewConstHistogram(descHookSeconds, s.Latency.Count, s.Latency.Sum, s.Latency.Buckets)
}
