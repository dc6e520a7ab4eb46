package voicemail

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// Prompts gives a prompt's audio (8 kHz mono 16-bit) by name, nil when the
// set has no such prompt; a missing prompt is skipped.
type Prompts interface {
	Get(name string) []int16
}

// Defaults of Settings.
const (
	// DefaultInputTimeout is how long a menu waits for a key before it
	// repeats itself.
	DefaultInputTimeout = 10 * time.Second
	// DefaultGreetingSilence ends a greeting recording when the System sets
	// no silenceTimeout.
	DefaultGreetingSilence = 3 * time.Second
	// SilenceLevel is the mean absolute sample value at or below which a
	// 20 ms frame counts as silence (about -48 dBFS).
	SilenceLevel = 128
	// maxTries is how many wrong PINs, or menus without an answer, end
	// the call.
	maxTries = 3
)

// Settings are what the deposit and retrieval applications share.
type Settings struct {
	Store   *Store
	Prompts Prompts
	// System is the System voicemail block (maxMessage, minMessage,
	// silenceTimeout).
	System config.Voicemail
	// Location is a tenant's time zone for reading dates; nil: UTC.
	Location func(tenant string) *time.Location
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// OnAuthFailure is called when a caller gave three wrong PINs; the
	// guard counts it as an authentication failure.
	OnAuthFailure func(call b2bua.CallInfo, tenant, mailbox string)
	// InputTimeout replaces DefaultInputTimeout (tests).
	InputTimeout time.Duration
	Log          *slog.Logger
}

func (s *Settings) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Settings) inputTimeout() time.Duration {
	if s.InputTimeout > 0 {
		return s.InputTimeout
	}
	return DefaultInputTimeout
}

func (s *Settings) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (s *Settings) location(tenant string) *time.Location {
	if s.Location != nil {
		if l := s.Location(tenant); l != nil {
			return l
		}
	}
	return time.UTC
}

// maxMessage is the mailbox's maxMessage, else the System's, else 3m.
func (s *Settings) maxMessage(box config.Mailbox) time.Duration {
	if d := box.MaxMessage.D(); d > 0 {
		return d
	}
	if d := s.System.MaxMessage.D(); d > 0 {
		return d
	}
	return 3 * time.Minute
}

// errHangup ends an application: the caller hung up.
var errHangup = b2bua.ErrHungUp

// speaker plays to a channel and reads its keys.
type speaker struct {
	ch      b2bua.Channel
	prompts Prompts
}

// play plays the pieces in order (nil pieces skipped). A key pressed while
// playing stops it and is returned when it is one of stop ("" stops on
// none; a key not in stop is dropped); 0 when everything played.
func (sp *speaker) play(ctx context.Context, stop string, pieces ...[]int16) (rune, error) {
	d, _, err := sp.playAll(ctx, stop, pieces...)
	return d, err
}

// playAll is play that also reports whether every piece was sent whole (a
// key pressed just as the last one ended does not cut it).
func (sp *speaker) playAll(ctx context.Context, stop string, pieces ...[]int16) (key rune, whole bool, err error) {
	last := -1
	for i, pcm := range pieces {
		if len(pcm) > 0 {
			last = i
		}
	}
	for i, pcm := range pieces {
		if len(pcm) == 0 {
			continue
		}
		d, finished, err := sp.playOne(ctx, stop, pcm)
		if err != nil {
			return 0, false, err
		}
		if d != 0 {
			return d, finished && i == last, nil
		}
	}
	return 0, true, nil
}

// playOne plays pcm; finished reports that it was sent whole even when a
// key came.
func (sp *speaker) playOne(ctx context.Context, stop string, pcm []int16) (key rune, finished bool, err error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sp.ch.Play(pctx, pcm) }()
	digits := sp.ch.Digits()
	for {
		select {
		case err := <-done:
			return 0, err == nil, playErr(ctx, err)
		case d, ok := <-digits:
			if !ok {
				digits = nil
				continue
			}
			if !containsRune(stop, d) {
				continue
			}
			cancel()
			err := <-done
			return d, err == nil, nil
		case <-sp.ch.Done():
			cancel()
			<-done
			return 0, false, errHangup
		}
	}
}

// playErr turns a Play error into errHangup when the call is over.
func playErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, b2bua.ErrHungUp) || ctx.Err() != nil {
		return errHangup
	}
	return err
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}

// say plays the named prompts; any key interrupts (and is returned).
func (sp *speaker) say(ctx context.Context, names ...string) (rune, error) {
	return sp.play(ctx, allKeys, sp.get(names...)...)
}

const allKeys = "0123456789*#ABCD"

func (sp *speaker) get(names ...string) [][]int16 {
	out := make([][]int16, 0, len(names))
	for _, n := range names {
		out = append(out, sp.prompts.Get(n))
	}
	return out
}

// key waits up to timeout for a key; 0 when none came.
func (sp *speaker) key(ctx context.Context, timeout time.Duration) (rune, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	digits := sp.ch.Digits()
	for {
		select {
		case d, ok := <-digits:
			if ok {
				return d, nil
			}
			digits = nil // no more keys: wait out the timeout
		case <-t.C:
			return 0, nil
		case <-sp.ch.Done():
			return 0, errHangup
		case <-ctx.Done():
			return 0, errHangup
		}
	}
}

// entry reads keys until '#', a pause of timeout or 16 keys; first is a key
// already pressed (0: none). It returns what was typed without the '#'.
func (sp *speaker) entry(ctx context.Context, first rune, timeout time.Duration) (string, error) {
	var b []rune
	if first != 0 && first != '#' {
		b = append(b, first)
	} else if first == '#' {
		return "", nil
	}
	for len(b) < 16 {
		d, err := sp.key(ctx, timeout)
		if err != nil {
			return "", err
		}
		if d == 0 || d == '#' {
			break
		}
		b = append(b, d)
	}
	return string(b), nil
}
