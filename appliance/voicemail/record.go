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
// trimmed) and why it ended. On hang-up the frames Listen still delivers
// (what the caller said last, queued behind a busy recorder) are written
// too.
func record(ctx context.Context, ch b2bua.Channel, rec *Recorder, lim limits) (keep int64, why string, err error) {
	frames, stop := ch.Listen()
	defer stop()
	var written int64
	// write takes one frame; a non-empty reason ends the recording.
	write := func(f []int16) (string, error) {
		if lim.max > 0 && written+int64(len(f)) > lim.max {
			f = f[:lim.max-written]
		}
		if err := rec.Write(f); err != nil {
			return "", err
		}
		written += int64(len(f))
		if !silent(f) {
			keep = written
		}
		if lim.max > 0 && written >= lim.max {
			return endMax, nil
		}
		if lim.silence > 0 && written-keep >= lim.silence {
			return endSilence, nil
		}
		return "", nil
	}
	digits := ch.Digits()
	for {
		select {
		case <-ctx.Done(): // the call ended (or the PBX stops)
			return keep, endHangup, drain(frames, write)
		case <-ch.Done():
			return keep, endHangup, drain(frames, write)
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
			if why, err := write(f); why != "" || err != nil {
				return keep, why, err
			}
		}
	}
}

// drainFrames and drainWait bound what is read after a hang-up: the frames a Listen
// still delivers (its backlog, 2 s) within a second.
const (
	drainFrames = 150
	drainWait   = time.Second
)

// drain writes the frames Listen delivers after the call ended until it
// closes them (the audio that arrived before the hang-up, queued behind a
// busy recorder or not yet due on the time line), within drainFrames and drainWait.
func drain(frames <-chan []int16, write func([]int16) (string, error)) error {
	t := time.NewTimer(drainWait)
	defer t.Stop()
	for range drainFrames {
		select {
		case f, ok := <-frames:
			if !ok {
				return nil
			}
			if why, err := write(f); why != "" || err != nil {
				return err
			}
		case <-t.C:
			return nil
		}
	}
	return nil
}
