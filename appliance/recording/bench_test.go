package recording

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/rtpcore"
)

// BenchmarkMixerPacket is the writer's cost per RTP packet (decode, place,
// written out once per 200 ms drain to a WAV on a discarding sink): a recorded call costs about 100 of
// these a second (50 packets each way).
func BenchmarkMixerPacket(b *testing.B) {
	w, err := rtpcore.NewWAVWriter(discardSeeker{}, 8000, 2)
	if err != nil {
		b.Fatal(err)
	}
	m := newMixer(w, 8000, t0)
	payload := pcma(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := i / 2
		h := rtpcore.Header{PayloadType: rtpcore.PayloadPCMA, Timestamp: uint32(160 * n), SSRC: uint32(1 + i%2)}
		if err := m.packet(i%2, h, payload, t0.Add(time.Duration(n)*20*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		if i%20 == 19 { // a drain: 200 ms of both directions
			if err := m.emit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

type discardSeeker struct{}

func (discardSeeker) Write(p []byte) (int, error)                { return len(p), nil }
func (discardSeeker) Seek(int64, int) (int64, error)             { return 0, nil }
func (discardSeeker) WriteAt(p []byte, _ int64) (n int, e error) { return len(p), nil }

// BenchmarkListFirstPage100k lists the first page (100, newest first) of
// 100,000 recordings over 100 days; the target is a p99 under 20 ms.
func BenchmarkListFirstPage100k(b *testing.B) {
	dd := b.TempDir()
	s, err := New(Options{DataDir: dd}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	base := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	const n = 100_000
	step := 100 * 24 * time.Hour / n
	for i := 0; i < n; i++ {
		start := base.Add(time.Duration(i) * step)
		sc := Sidecar{ID: string(cdr.NewID(start)), Tenant: fmt.Sprintf("t%d", i%10), Direction: "inbound", From: "+15550100", To: "200",
			AnsweredBy: "200", Start: start, End: start.Add(time.Minute), DurationMS: 60000, Format: formatFor(8, 8000), Bytes: 1920044, SHA256: "00"}
		dir := s.dayDir(sc.Tenant, start)
		if i == 0 || start.Add(-step).Day() != start.Day() {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				b.Fatal(err)
			}
		}
		body, _ := json.Marshal(&sc)
		if err := os.WriteFile(filepath.Join(dir, sc.ID+sidecarExt), body, 0o640); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		p, err := s.List(ctx, Query{})
		took = append(took, time.Since(t))
		if err != nil || len(p.Recordings) != 100 || p.NextCursor == "" {
			b.Fatalf("page: %d, %v", len(p.Recordings), err)
		}
	}
	b.StopTimer()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkTapAndSort is the taps' cost per packet on the relay (append
// to the log) plus the writer's sort of the log into its slices' bins,
// for 500 recordings' 1,000 taps over the writer's 10 slices, one swap
// and sort every 20 ms of packets (1,000 packets), the bins emptied as
// serving would every 10 sorts.
func BenchmarkTapAndSort(b *testing.B) {
	s := &Store{}
	taps := make([]*tapBuffer, 1000)
	for i := range taps {
		taps[i] = &tapBuffer{log: &s.taps, slot: uint32(i), serial: 1, slice: uint8(i / 2 % drainSlices), max: 250}
	}
	raw := rtpcore.AppendHeader(nil, false, rtpcore.PayloadPCMA, 0, 0, 1)
	raw = append(raw, pcma(1000)...)
	h, err := rtpcore.ParseHeader(raw)
	if err != nil {
		b.Fatal(err)
	}
	p := rtpcore.Packet{Dir: rtpcore.In, Header: h, Raw: raw, At: t0}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		taps[i%len(taps)].TapRTP(&p)
		if i%len(taps) == len(taps)-1 {
			s.sort()
			if i/len(taps)%drainSlices == drainSlices-1 {
				for sl := range s.bins {
					s.bins[sl] = s.bins[sl][:0]
				}
			}
		}
	}
	b.StopTimer()
	for _, t := range taps {
		if t.dropped.Load() != 0 {
			b.Fatal("packets dropped")
		}
	}
}
