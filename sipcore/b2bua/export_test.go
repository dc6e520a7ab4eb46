package b2bua

import "time"

// SetRetransmitTimers sets the T1 and T2 that pace m's retransmission of a
// 2xx to a re-INVITE and bound the wait for the ACK of any 2xx it sends, so
// a test sees the 64*T1 give-up quickly.
func SetRetransmitTimers(m *Manager, t1, t2 time.Duration) {
	m.t1, m.t2 = t1, t2
}

// ParseDTMFInfo reads the digit and duration of a DTMF INFO body.
var ParseDTMFInfo = parseDTMFInfo

// DialogCount is the number of entries in m's dialog table.
func DialogCount(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.dialogs)
}
