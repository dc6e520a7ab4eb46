//go:build !linux

package rtpcore

// kernelRelay: kernel forwarding is Linux only.
type kernelRelay struct{}

type offloadState struct{}

func (e *Engine) startKernel(opts Options) {
	if opts.KernelForwarding {
		e.log.Warn("kernel forwarding is Linux only: the relay forwards every packet itself")
	}
}

func (e *Engine) stopKernel() {}

// KernelForwarding reports whether the engine forwards settled streams in
// the kernel: never here.
func (e *Engine) KernelForwarding() bool { return false }

func (e *Engine) kernelStats() (int, uint64) { return 0, 0 }

func (l *Leg) relayedMedia(*Leg)              {}
func (l *Leg) resetOffload()                  {}
func (l *Leg) resetOffloadWith(*Leg)          {}
func (l *Leg) takeBack()                      {}
func (l *Leg) addKernel(*LegStats, recvStats) {}
func (l *Leg) lastMono() int64                { return l.lastPacket.Load() }
func (l *Leg) offloaded() bool                { return false }
