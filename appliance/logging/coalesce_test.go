package logging

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingWriter records each Write it gets.
type countingWriter struct {
	mu     sync.Mutex
	writes [][]byte
	err    error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), w.err
}

func (w *countingWriter) snapshot() (n int, all string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes), string(bytes.Join(w.writes, nil))
}

// TestCoalescerBatchesRecords: records logged together leave in one write,
// whole and in order, once the delay has passed, without a Flush.
func TestCoalescerBatchesRecords(t *testing.T) {
	w := &countingWriter{}
	c := NewCoalescer(w, 20*time.Millisecond, 0)
	log := slog.New(slog.NewTextHandler(c, nil))
	for i := range 50 {
		log.Info("call ended", "n", i)
	}
	deadline := time.Now().Add(5 * time.Second)
	n, all := w.snapshot()
	for n == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		n, all = w.snapshot()
	}
	if n != 1 {
		t.Fatalf("%d writes for 50 records logged at once, want 1", n)
	}
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines, want 50", len(lines))
	}
	for i, l := range lines {
		if !strings.Contains(l, fmt.Sprintf("n=%d", i)) || !strings.Contains(l, "call ended") {
			t.Fatalf("line %d: %q", i, l)
		}
	}
}

// TestCoalescerFullBatchAndFlush: a batch past the size bound is written
// by the record that filled it, and Flush writes what is queued at once.
func TestCoalescerFullBatchAndFlush(t *testing.T) {
	w := &countingWriter{}
	c := NewCoalescer(w, time.Hour, 100)
	rec := []byte(strings.Repeat("x", 59) + "\n")
	c.Write(rec)
	if n, _ := w.snapshot(); n != 0 {
		t.Fatalf("%d writes before the batch is full, want 0", n)
	}
	c.Write(rec)
	if n, all := w.snapshot(); n != 1 || len(all) != 120 {
		t.Fatalf("full batch: %d writes of %d bytes, want 1 of 120", n, len(all))
	}
	c.Write([]byte("last\n"))
	c.Flush()
	if n, all := w.snapshot(); n != 2 || !strings.HasSuffix(all, "x\nlast\n") {
		t.Fatalf("after Flush: %d writes, %q", n, all)
	}
	c.Flush()
	if n, _ := w.snapshot(); n != 2 {
		t.Fatalf("empty Flush wrote: %d writes", n)
	}
}

// TestCoalescerReportsWriteError: a failed batch write is reported by the
// next Write.
func TestCoalescerReportsWriteError(t *testing.T) {
	boom := errors.New("disk full")
	w := &countingWriter{err: boom}
	c := NewCoalescer(w, time.Hour, 0)
	if _, err := c.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	c.Flush()
	if _, err := c.Write([]byte("b\n")); !errors.Is(err, boom) {
		t.Fatalf("write after a failed batch: %v, want %v", err, boom)
	}
	if _, err := c.Write([]byte("c\n")); err != nil {
		t.Fatalf("error reported twice: %v", err)
	}
}

// BenchmarkCoalescedLog: the cost of an info record through the text
// handler to a pipe (as stderr is to journald or a supervisor), written
// record by record or coalesced with the default delay.
func BenchmarkCoalescedLog(b *testing.B) {
	for _, coalesce := range []bool{false, true} {
		b.Run(fmt.Sprintf("coalesce=%t", coalesce), func(b *testing.B) {
			r, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			drained := make(chan struct{})
			go func() { defer close(drained); _, _ = io.Copy(io.Discard, r) }()
			var w io.Writer = pw
			var c *Coalescer
			if coalesce {
				c = NewCoalescer(pw, 0, 0)
				w = c
			}
			log := slog.New(slog.NewTextHandler(w, nil))
			b.ReportAllocs()
			for b.Loop() {
				log.Info("call ended", "call", "c-123", "cause", "answered", "sip_status", 200)
			}
			if c != nil {
				c.Flush()
			}
			pw.Close()
			<-drained
			r.Close()
		})
	}
}
