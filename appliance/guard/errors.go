package guard

import "errors"

// ErrNotBanned is returned by Guard.Lift for an address that has no active ban.
var ErrNotBanned = errors.New("not banned")

// Refusals of Limiter.Reserve; each names the limit that refused the call.
// ErrMinutesPerHour and ErrMinutesPerMonth are also why the Limiter ends a
// running outbound call (the call record's reason).
var (
	// ErrConcurrentCalls: the tenant has maxConcurrentCalls calls up.
	ErrConcurrentCalls = errors.New("maxConcurrentCalls reached")
	// ErrConcurrentPerAccount: the account has maxConcurrentPerAccount calls up.
	ErrConcurrentPerAccount = errors.New("maxConcurrentPerAccount reached")
	// ErrOutboundPerMinute: the tenant started maxOutboundPerMinute outbound
	// calls in the last minute.
	ErrOutboundPerMinute = errors.New("maxOutboundPerMinute reached")
	// ErrMinutesPerHour: the tenant's outbound calls of this clock hour (in
	// its time zone) used outboundMinutesPerHour.
	ErrMinutesPerHour = errors.New("outboundMinutesPerHour used")
	// ErrMinutesPerMonth: the tenant's outbound calls of this calendar month
	// (in its time zone) used outboundMinutesPerMonth.
	ErrMinutesPerMonth = errors.New("outboundMinutesPerMonth used")
)
