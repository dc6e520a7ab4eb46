package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"time"
)

// pprofEnv names the environment variable that turns on the profiling
// endpoint, a debugging aid: PBX_PPROF=127.0.0.1:6060 serves Go's
// /debug/pprof/ handlers on that loopback address. It is off when unset,
// and refused for any address that is not loopback (profiles show memory
// contents such as goroutine stacks, so they must never face a network).
const pprofEnv = "PBX_PPROF"

// errPprofNotLoopback refuses a PBX_PPROF address that is not loopback.
var errPprofNotLoopback = errors.New("address is not a loopback IP")

// startPprof serves the profiling handlers when PBX_PPROF is set. It
// returns a function that stops the server (a no-op when it is off).
func startPprof(log *slog.Logger) (func(), error) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return func() {}, nil
	}
	if err := checkLoopback(addr); err != nil {
		return nil, fmt.Errorf("%s=%q: %w", pprofEnv, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pprofEnv, err)
	}
	// The block and mutex profiles record nothing unless asked to: with
	// the endpoint on, contended locks and waits of 10 us or more (and a
	// sample of shorter ones) are recorded, at a small cost.
	runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/memory", serveMemoryClasses)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Warn("profiling endpoint on (debugging aid)", "addr", ln.Addr().String(), "env", pprofEnv)
	return func() { _ = srv.Close() }, nil
}

// checkLoopback accepts host:port only when host is a loopback IP literal.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errPprofNotLoopback
	}
	return nil
}

// serveMemoryClasses writes the runtime's memory classes
// (runtime/metrics /memory/classes/...) and the collection count, one
// "name bytes" line each: which class holds the process's memory after a
// load (free heap not yet returned, spans, GC metadata, stacks).
func serveMemoryClasses(w http.ResponseWriter, _ *http.Request) {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/gc/cycles/total:gc-cycles" {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			fmt.Fprintf(w, "%s %d\n", s.Name, s.Value.Uint64())
		}
	}
}
