package sipcore

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/emiago/sipgo/sip"
)

// LogKindKey is the attribute naming what a log record reports; the
// daemon's log handler rate-limits records per kind. Records a remote party
// can cause at will carry it.
const LogKindKey = "kind"

// Kinds of the log records the SIP stack writes per message.
const (
	KindMalformed     = "sip.malformed"      // a message that does not parse
	KindUnknownMethod = "sip.unknown_method" // a request no handler takes
)

// maxLoggedValue bounds a string attribute of sipgo's records: parser errors
// quote the offending line.
const maxLoggedValue = 96

// SIPStackLogger returns a logger for sipgo (its transport, transaction and
// server layers, or sip.SetDefaultLogger) that never writes raw message
// bytes, keeps one value per attribute key (sipgo nests With("caller", ...)
// twice), and tags each record with a kind so that floods are rate-limited.
func SIPStackLogger(log *slog.Logger) *slog.Logger {
	return slog.New(&sipgoHandler{next: log.Handler()})
}

// sipgoHandler rewrites sipgo's records before the daemon's handler sees
// them: a parse failure becomes a warning of kind sip.malformed with the
// source address and the datagram's length and hash instead of its bytes.
type sipgoHandler struct {
	next    slog.Handler
	attrs   []slog.Attr // sipgo's With attributes, one per key, last wins
	sources *sourceRing // where recent reads came from; nil: unknown
	group   bool        // WithGroup was called: attrs were applied to next
}

func (h *sipgoHandler) Enabled(ctx context.Context, level slog.Level) bool {
	// A parse failure is logged at error and written as a warning.
	return h.next.Enabled(ctx, min(level, slog.LevelWarn))
}

func (h *sipgoHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	if h.group {
		c.next = h.next.WithAttrs(attrs)
		return &c
	}
	c.attrs = mergeAttrs(h.attrs, attrs)
	return &c
}

func (h *sipgoHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(h.attrs).WithGroup(name)
	c.attrs, c.group = nil, true
	return &c
}

// mergeAttrs appends add to base, a later key replacing an earlier one.
func mergeAttrs(base, add []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(base)+len(add))
	for _, a := range append(append([]slog.Attr(nil), base...), add...) {
		replaced := false
		for i := range out {
			if out[i].Key == a.Key {
				out[i], replaced = a, true
				break
			}
		}
		if !replaced {
			out = append(out, a)
		}
	}
	return out
}

func (h *sipgoHandler) Handle(ctx context.Context, r slog.Record) error {
	level, kind := r.Level, "sipgo "+r.Message
	switch r.Message {
	case "failed to parse":
		level, kind = slog.LevelWarn, KindMalformed
	case "Server tx failed to handle request":
		level, kind = slog.LevelWarn, KindMalformed
	case "SIP request handler not found":
		level, kind = slog.LevelDebug, KindUnknownMethod
	}
	if !h.next.Enabled(ctx, level) {
		return nil
	}
	out := slog.NewRecord(r.Time, level, r.Message, r.PC)
	out.AddAttrs(h.attrs...)
	keys := map[string]bool{LogKindKey: true}
	for _, a := range h.attrs {
		keys[a.Key] = true
	}
	var data string
	hasData := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "data" {
			data, hasData = a.Value.String(), true
			return true
		}
		if keys[a.Key] {
			return true
		}
		keys[a.Key] = true
		a = sanitizeAttr(a)
		if kind == KindMalformed && a.Value.Kind() == slog.KindString {
			// Parser errors quote the message; a request line is the
			// sender's bytes. Keep the words, not the quotes.
			if a.Key == "req" {
				a.Value = slog.StringValue(firstWord(a.Value.String()))
			} else {
				a.Value = slog.StringValue(redactQuoted(a.Value.String()))
			}
		}
		out.AddAttrs(a)
		return true
	})
	if hasData {
		if src := h.sources.lookup(data); src != "" && !keys["src"] {
			out.AddAttrs(slog.String("src", src))
		}
		out.AddAttrs(slog.Int("data_len", len(data)), slog.String("data_hash", shortHash(data)))
	}
	out.AddAttrs(slog.String(LogKindKey, kind))
	return h.next.Handle(ctx, out)
}

// sanitizeAttr bounds a string or error attribute and replaces what is
// not printable, so that no message bytes reach the log.
func sanitizeAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, printable(v.String()))
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, printable(err.Error()))
		}
		if s, ok := v.Any().(fmt.Stringer); ok {
			return slog.String(a.Key, printable(s.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// printable keeps printable ASCII, replaces other bytes with '.', and cuts
// s to maxLoggedValue bytes, saying how long it was.
func printable(s string) string {
	clean := len(s) <= maxLoggedValue
	for i := 0; clean && i < len(s); i++ {
		clean = s[i] >= 0x20 && s[i] < 0x7f
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxLoggedValue; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('.')
		}
	}
	if len(s) > maxLoggedValue {
		fmt.Fprintf(&b, "...(%d bytes)", len(s))
	}
	return b.String()
}

// redactQuoted replaces every '...' or "..." segment of s with its length,
// so that a parser error keeps its words but not the bytes it quotes; an
// unclosed quote hides the rest.
func redactQuoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(s, `'"`)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		q := s[i]
		rest := s[i+1:]
		j := strings.IndexByte(rest, q)
		if j < 0 {
			fmt.Fprintf(&b, "<%d bytes>", len(rest))
			return b.String()
		}
		fmt.Fprintf(&b, "<%d bytes>", j)
		s = rest[j+1:]
	}
}

// firstWord is s up to its first space, at most 16 bytes: the method of a
// request line.
func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w[:min(len(w), 16)]
}

// shortHash is 8 hex digits identifying a payload, to match repeated ones.
func shortHash(s string) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(s))
	return fmt.Sprintf("%08x", f.Sum32())
}

// sourceRing remembers where the last reads came from, so that a parse
// failure sipgo logs without the source can be attributed: the read filter
// notes each read just before sipgo parses it on the same goroutine.
type sourceRing struct {
	mu   sync.Mutex
	next int
	ents [128]sourceEntry
}

// sourceEntry is one read: its source, length and first bytes.
type sourceEntry struct {
	addr net.Addr
	n    int
	head [32]byte
}

func (r *sourceRing) note(addr net.Addr, data []byte) {
	r.mu.Lock()
	e := &r.ents[r.next]
	r.next = (r.next + 1) % len(r.ents)
	e.addr, e.n = addr, len(data)
	copy(e.head[:], data)
	r.mu.Unlock()
}

// lookup returns the source of the most recent read with data's length and
// first bytes, or "" when none is remembered.
func (r *sourceRing) lookup(data string) string {
	if r == nil {
		return ""
	}
	head := []byte(data[:min(len(data), 32)])
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range len(r.ents) {
		e := &r.ents[(r.next-1-i+2*len(r.ents))%len(r.ents)]
		if e.addr != nil && e.n == len(data) && bytes.Equal(e.head[:len(head)], head) {
			return e.addr.String()
		}
	}
	return ""
}

// noteSources wraps a read filter so that each read's source is remembered
// before the filter (and sipgo's parser) sees it.
func noteSources(r *sourceRing, next func(sip.TransportReadProps, []byte) ([]byte, error)) func(sip.TransportReadProps, []byte) ([]byte, error) {
	return func(props sip.TransportReadProps, data []byte) ([]byte, error) {
		r.note(props.RemoteAddr, data)
		return next(props, data)
	}
}
