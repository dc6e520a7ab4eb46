package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"pbx/appliance/config"
	"pbx/appliance/events"
	"pbx/web/api"
)

type fakeMedia struct{}

func (fakeMedia) Media(context.Context) (api.MediaTotals, error) {
	return api.MediaTotals{Legs: 4, PacketsIn: 1000, PacketsOut: 990, PacketsLost: 10, PortsInUse: 4, PortsResting: 6, PortsFree: 90, PortsExhausted: 3,
		Jitter: api.Histogram{Buckets: map[float64]uint64{0.001: 1, 0.002: 2}, Count: 2, Sum: 0.003}}, nil
}

// fakeStatusUploads is the status of a PBX whose recordings go to S3.
type fakeStatusUploads struct{ fakeStatus }

func (f fakeStatusUploads) Status(ctx context.Context) (api.StatusSnapshot, error) {
	s, err := f.fakeStatus.Status(ctx)
	s.Uploads = &api.UploadQueue{Pending: 6, OldestAgeS: 120, Failed: 1}
	return s, err
}

type fakeSIP struct{}

func (fakeSIP) SIP(context.Context) (api.SIPStats, error) {
	return api.SIPStats{OpenTransactions: 12, UDPSources: 40, TCPOpen: 3, TCPAccepted: 9,
		Refused: map[string]uint64{"over_cap": 5}, Dropped: map[string]uint64{"malformed": 7},
		TCPRefused: map[string]uint64{"per_source": 2}, TCPClosed: map[string]uint64{"idle": 4}}, nil
}

type fakeCallLogStats struct{}

func (fakeCallLogStats) CallLogStats(context.Context) (api.CallLogStats, error) {
	return api.CallLogStats{Commits: 7, Pending: 2, CommitTime: api.Histogram{Buckets: map[float64]uint64{0.01: 7}, Count: 7, Sum: 0.02},
		MarkerTime: api.Histogram{Buckets: map[float64]uint64{0.001: 4}, Count: 5, Sum: 0.3},
		RecordTime: api.Histogram{Buckets: map[float64]uint64{0.001: 3}, Count: 3, Sum: 0.001}}, nil
}

func scrape(t *testing.T, e *env) map[string]*dto.MetricFamily {
	t.Helper()
	r := e.get("/v1/metrics", secretAdmin)
	if r.status != 200 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, r.body)
	}
	return fams
}

// value returns the value of the series of name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics: /v1/metrics parses as the Prometheus text format, reads the
// components' state, counts calls from the event bus and API requests by
// route, and no label value is a number or an address.
func TestMetrics(t *testing.T) {
	bus := events.New(0)
	e := newEnv(t, withBus(bus), func(_ *config.API, o *Options) {
		o.Backends.Media = fakeMedia{}
		o.Backends.CallLogStats = fakeCallLogStats{}
		o.Backends.SIP = fakeSIP{}
		o.Backends.Status = fakeStatusUploads{}
	})
	e.get("/v1/status", secretAdmin)
	fams := scrape(t, e)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pbx_calls_active", []string{"direction", "inbound"}, 1},
		{"pbx_calls_active", []string{"direction", "outbound"}, 1},
		{"pbx_calls_active", []string{"direction", "internal"}, 0},
		{"pbx_registrations", nil, 2},
		{"pbx_trunks", []string{"state", "up"}, 3},
		{"pbx_guard_packets_total", nil, 42},
		{"pbx_guard_bans_active", nil, 1},
		{"pbx_rtp_packets_total", []string{"direction", "in"}, 1000},
		{"pbx_rtp_packets_lost_total", nil, 10},
		{"pbx_rtp_ports", []string{"state", "free"}, 90},
		{"pbx_rtp_ports_exhausted_total", nil, 3},
		{"pbx_rtp_jitter_seconds", nil, 2},
		{"pbx_cdr_commits_total", nil, 7},
		{"pbx_cdr_call_wait_seconds", []string{"step", "marker"}, 5},
		{"pbx_cdr_call_wait_seconds", []string{"step", "record"}, 3},
		{"pbx_sip_transactions_open", nil, 12},
		{"pbx_upload_queue_jobs", nil, 6},
		{"pbx_upload_oldest_job_age_seconds", nil, 120},
		{"pbx_upload_failed_total", nil, 1},
		{"pbx_sip_refused_total", []string{"reason", "over_cap"}, 5},
		{"pbx_sip_dropped_total", []string{"reason", "malformed"}, 7},
		{"pbx_sip_tcp_connections", nil, 3},
		{"pbx_sip_tcp_refused_total", []string{"reason", "per_source"}, 2},
		{"pbx_sip_tcp_closed_total", []string{"reason", "idle"}, 4},
		{"pbx_cdr_pending", nil, 2},
		{"pbx_api_requests_total", []string{"route", "/v1/status", "code", "200"}, 1},
	}
	for _, c := range checks {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}

	// Calls are counted from the bus as they end and answer.
	start := time.Now().Add(-3 * time.Second)
	answered := start.Add(2 * time.Second)
	bus.Publish(events.Event{Type: events.CallAnswered, Data: api.Call{ID: "c1", Direction: "outbound", StartedAt: start, AnsweredAt: &answered}})
	bus.Publish(events.Event{Type: events.CallEnded, Tenant: "acme", Data: api.Call{ID: "c1", Direction: "outbound", Cause: "answered"}})
	// The other tenant's side of the same call is not a second call.
	bus.Publish(events.Event{Type: events.CallEnded, Tenant: "globex", Data: api.Call{ID: "c1", Direction: "outbound", Cause: "answered"}})
	bus.Publish(events.Event{Type: events.CallEnded, Data: api.Call{ID: "c2", Direction: "inbound", Cause: "busy"}})
	deadline := time.Now().Add(5 * time.Second)
	for {
		fams = scrape(t, e)
		a, _ := value(fams, "pbx_calls_total", "direction", "outbound", "cause", "answered")
		b, _ := value(fams, "pbx_calls_total", "direction", "inbound", "cause", "busy")
		s, _ := value(fams, "pbx_call_setup_seconds")
		if a == 1 && b == 1 && s == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls_total answered %v busy %v setup %v", a, b, s)
		}
		time.Sleep(20 * time.Millisecond)
	}

	numberish := regexp.MustCompile(`^\+?[0-9]{4,}$|^[0-9.]+:[0-9]+$|^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`)
	for name, f := range fams {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if numberish.MatchString(l.GetValue()) {
					t.Errorf("%s has a high-cardinality label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMonitoringExamples: every metric the shipped Grafana dashboard
// queries is one /v1/metrics serves, and the Prometheus scrape example
// passes promtool's check where promtool is installed.
func TestMonitoringExamples(t *testing.T) {
	bus := events.New(0)
	e := newEnv(t, withBus(bus), func(_ *config.API, o *Options) {
		o.Backends.Media = fakeMedia{}
		o.Backends.CallLogStats = fakeCallLogStats{}
	})
	e.get("/v1/status", secretAdmin) // a request counted by route
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		// Until the metrics follow the bus (they subscribe as the server
		// starts), an event may pass them by.
		bus.Publish(events.Event{Type: events.CallEnded, Data: api.Call{ID: fmt.Sprint("c", i), Direction: "inbound", Cause: "answered"}})
		fams = scrape(t, e)
		if _, ok := fams["pbx_calls_total"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	dash, err := os.ReadFile("../packaging/examples/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	names := regexp.MustCompile(`\b(?:pbx|process|go)_[a-z_]+`)
	seen := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
				seen++
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suffix); ok && fams[b] != nil && fams[b].GetType() == dto.MetricType_HISTOGRAM {
						base = b
					}
				}
				if fams[base] == nil {
					t.Errorf("panel %q queries %s, which /v1/metrics does not serve", p.Title, n)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("only %d metric references in the dashboard", seen)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed: the scrape example's check was not run")
		return
	}
	cfg, err := os.ReadFile("../packaging/examples/monitoring/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "pbx-token")
	if err := os.WriteFile(tokenFile, []byte(secretAdmin), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = bytes.ReplaceAll(cfg, []byte("/etc/prometheus/pbx-token"), []byte(tokenFile))
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
