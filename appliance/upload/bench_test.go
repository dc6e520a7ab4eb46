package upload

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkQueueThroughput uploads recordings of 1 MiB (about 33 s of
// stereo 8 kHz audio) with their sidecars through the queue to a
// versitygw on loopback, two at once, and reports recordings and
// megabytes per second.
func BenchmarkQueueThroughput(b *testing.B) {
	srv := startS3(b)
	dataDir := b.TempDir()
	q, err := New(Options{DataDir: dataDir, Store: srv.client(b, S3Options{}), KeyPrefix: "{tenant}/{yyyy}/{mm}/{dd}/{callid}.wav", KeepLocal: true}, discard())
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(dataDir, "recordings")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		b.Fatal(err)
	}
	audio := bytes.Repeat([]byte{0x55}, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = q.Run(ctx) }()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("20261121T151230.000Z-b%07d", i)
		r := Recording{ID: id, Tenant: "acme", Start: time.Now(), Audio: filepath.Join(dir, id+".wav"), Sidecar: filepath.Join(dir, id+".json")}
		if err := os.WriteFile(r.Audio, audio, 0o640); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(r.Sidecar, []byte(`{"id":"`+id+`"}`), 0o640); err != nil {
			b.Fatal(err)
		}
		if err := q.Enqueue(r); err != nil {
			b.Fatal(err)
		}
	}
	for q.Pending() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	if s := q.Stats(); s.Failed != 0 {
		b.Fatalf("%d uploads failed", s.Failed)
	}
	b.ReportMetric(float64(b.N)/el, "recordings/s")
	b.ReportMetric(float64(b.N)*float64(len(audio))/el/1e6, "MB/s")
}
