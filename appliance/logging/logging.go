package logging

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// Format is how records are written.
type Format int

const (
	// Text is slog's key=value format, for terminals and files.
	Text Format = iota
	// JSON is one JSON object per line.
	JSON
	// Journal is JSON prefixed with the syslog priority, for journald.
	Journal
)

// String names the format as a command-line flag would.
func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case Journal:
		return "journal"
	default:
		return "text"
	}
}

// UnderJournal reports whether stderr is connected to the systemd journal.
func UnderJournal() bool {
	return isJournal(os.Stderr)
}

// Detect returns Journal when w is the journal stream systemd connected the process
// to, and Text otherwise.
func Detect(w io.Writer) Format {
	if f, ok := w.(*os.File); ok && isJournal(f) {
		return Journal
	}
	return Text
}

// New returns a logger writing records at level and above to w in the format
// Detect chooses.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return NewFormat(w, level, Detect(w))
}

// NewFormat returns a logger writing records at level and above to w in format f.
func NewFormat(w io.Writer, level slog.Level, f Format) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	switch f {
	case JSON:
		return slog.New(slog.NewJSONHandler(w, opts))
	case Journal:
		opts.ReplaceAttr = dropTime
		return slog.New(slog.NewJSONHandler(priorityWriter{w}, opts))
	default:
		return slog.New(slog.NewTextHandler(w, opts))
	}
}

// dropTime removes the top-level time attribute: journald records its own.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// journalStream parses JOURNAL_STREAM ("DEVICE:INODE", both decimal).
func journalStream() (dev, ino uint64, ok bool) {
	d, i, found := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !found {
		return 0, 0, false
	}
	dev, err1 := strconv.ParseUint(d, 10, 64)
	ino, err2 := strconv.ParseUint(i, 10, 64)
	return dev, ino, err1 == nil && err2 == nil
}

// isJournal reports whether f is the stream JOURNAL_STREAM describes.
func isJournal(f *os.File) bool {
	dev, ino, ok := journalStream()
	if !ok {
		return false
	}
	fdev, fino, ok := devIno(f)
	return ok && fdev == dev && fino == ino
}

// priorityWriter prefixes each record with its syslog priority. The JSON handler
// writes one whole record per Write call (under its own lock), with "level" as the
// first key once time is dropped, so the priority is read from the line itself and
// no state is shared between concurrent records.
type priorityWriter struct{ w io.Writer }

var levelKey = []byte(`"level":"`)

func (p priorityWriter) Write(b []byte) (int, error) {
	line := make([]byte, 0, len(b)+3)
	line = append(line, '<', priority(b), '>')
	line = append(line, b...)
	if _, err := p.w.Write(line); err != nil {
		return 0, err
	}
	return len(b), nil
}

// priority maps the level slog wrote ("ERROR", "WARN+2", "DEBUG-4", ...) to a
// syslog priority digit.
func priority(b []byte) byte {
	i := bytes.Index(b, levelKey)
	if i < 0 {
		return '6'
	}
	name := b[i+len(levelKey):]
	level := slog.LevelInfo
	if end := bytes.IndexByte(name, '"'); end >= 0 {
		if err := level.UnmarshalText(name[:end]); err != nil {
			return '6'
		}
	}
	switch {
	case level >= slog.LevelError:
		return '3'
	case level >= slog.LevelWarn:
		return '4'
	case level > slog.LevelInfo:
		return '5'
	case level >= slog.LevelInfo:
		return '6'
	default:
		return '7'
	}
}
