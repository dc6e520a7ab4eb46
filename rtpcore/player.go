package rtpcore

import (
	"fmt"
	"io"
	"time"
)

// PlayerOptions configures a Player.
type PlayerOptions struct {
	// PayloadType is PayloadPCMA or PayloadPCMU.
	PayloadType uint8
	// Loop restarts at the beginning instead of ending (music on hold).
	Loop bool
	// FrameSamples is the samples per packet; zero means 160 (20 ms).
	FrameSamples int
}

// Player is a Source reading 8 kHz 16-bit PCM audio (as loaded by
// LoadWAV) and yielding G.711 frames. Several players may share the same
// samples; each keeps its own position. Pass it to Play or Leg.Play.
type Player struct {
	pcm   []int16
	opts  PlayerOptions
	pos   int
	frame int
}

// NewPlayer returns a player over pcm.
func NewPlayer(pcm []int16, opts PlayerOptions) (*Player, error) {
	if opts.PayloadType != PayloadPCMA && opts.PayloadType != PayloadPCMU {
		return nil, fmt.Errorf("player: payload type %d is not G.711", opts.PayloadType)
	}
	f := opts.FrameSamples
	if f <= 0 {
		f = 160
	}
	if f > maxPacket-HeaderLen {
		return nil, fmt.Errorf("player: %d samples per frame is too many", f)
	}
	if opts.Loop && len(pcm) == 0 {
		return nil, fmt.Errorf("player: cannot loop empty audio")
	}
	return &Player{pcm: pcm, opts: opts, frame: f}, nil
}

// OpenPlayer loads the WAV file at path (8 kHz mono 16-bit PCM) and
// returns a player over it.
func OpenPlayer(path string, opts PlayerOptions) (*Player, error) {
	pcm, err := LoadWAV(path)
	if err != nil {
		return nil, err
	}
	return NewPlayer(pcm, opts)
}

// Ptime is the duration of one frame at 8 kHz.
func (p *Player) Ptime() time.Duration {
	return time.Duration(p.frame) * time.Second / DefaultClockRate
}

// PayloadType is the player's payload type.
func (p *Player) PayloadType() uint8 { return p.opts.PayloadType }

// NextFrame encodes the next frame into dst. The last frame of a file
// that does not end on a frame boundary is padded with silence.
func (p *Player) NextFrame(dst []byte) ([]byte, uint32, error) {
	dst = dst[:0]
	for len(dst) < p.frame {
		if p.pos >= len(p.pcm) {
			if !p.opts.Loop {
				if len(dst) == 0 {
					return dst, 0, io.EOF
				}
				sil := Silence(p.opts.PayloadType)
				for len(dst) < p.frame {
					dst = append(dst, sil)
				}
				break
			}
			p.pos = 0
		}
		n := min(p.frame-len(dst), len(p.pcm)-p.pos)
		dst, _ = Encode(p.opts.PayloadType, dst, p.pcm[p.pos:p.pos+n])
		p.pos += n
	}
	return dst, uint32(p.frame), nil
}

// Rewind starts the audio again from the beginning.
func (p *Player) Rewind() { p.pos = 0 }
