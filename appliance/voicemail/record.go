package voicemail

import (
	"context"
	"time"

	"pbx/sipcore/b2bua"
)

// Why a recording ended.
const (
	endHangup  = "hangup"
	endKey     = "key"
	endMax     = "max"
	endSilence = "silence"
)

// limits bound one recording, in samples (0: no bound).
type limits struct {
	max     int64 // total length
	silence int64 // continuous silence that ends it
}

func samplesOf(d time.Duration) int64 { return int64(d) * sampleRate / int64(time.Second) }

// silent reports whether a frame's mean absolute level is at or below
// SilenceLevel.
func silent(frame []int16) bool {
	if len(frame) == 0 {
		return true
	}
	var sum int64
	for _, s := range frame {
		v := int64(s)
		if v < 0 {
			v = -v
		}
		sum += v
	}
	return sum/int64(len(frame)) <= SilenceLevel
}

// record writes the caller's audio to rec until the caller hangs up,
// presses '#', the maximum length is reached or lim.silence of continuous
// silence went by. It returns the number of samples up to the end of the
// last frame that was not silence (the length to keep: trailing silence is
// trimmed) and why it ended.
func record(ctx context.Context, ch b2bua.Channel, rec *Recorder, lim limits) (keep int64, why string, err error) {
	frames, stop := ch.Listen()
	defer stop()
	var written int64
	digits := ch.Digits()
	for {
		select {
		case <-ctx.Done():
			return keep, endHangup, nil
		case <-ch.Done():
			return keep, endHangup, nil
		case d, ok := <-digits:
			if !ok {
				digits = nil // no more keys; the audio goes on
			}
			if d == '#' {
				return keep, endKey, nil
			}
		case f, ok := <-frames:
			if !ok {
				return keep, endHangup, nil
			}
			if lim.max > 0 && written+int64(len(f)) > lim.max {
				f = f[:lim.max-written]
			}
			if err := rec.Write(f); err != nil {
				return keep, "", err
			}
			written += int64(len(f))
			if !silent(f) {
				keep = written
			}
			if lim.max > 0 && written >= lim.max {
				return keep, endMax, nil
			}
			if lim.silence > 0 && written-keep >= lim.silence {
				return keep, endSilence, nil
			}
		}
	}
}
