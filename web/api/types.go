package api

import (
	"time"

	"pbx/sipcore/calls"
)

// Status is the body of GET /v1/status. For a tenant-scoped caller the
// counts cover only its tenants (plus shared trunks).
type Status struct {
	Version       string      `json:"version"`
	StartedAt     time.Time   `json:"started_at"`
	UptimeS       int64       `json:"uptime_s"`
	CallsActive   int         `json:"calls_active"`
	Registrations int         `json:"registrations"`
	Trunks        TrunkCounts `json:"trunks"`
	Tenants       int         `json:"tenants"`
	// Degraded is true while something needs an operator (Problems says
	// what), e.g. call records that cannot be written on a full disk.
	Degraded bool     `json:"degraded"`
	Problems []string `json:"problems"`
	// Uploads is the recording upload queue, when recordings go to S3;
	// shown to tokens that see every tenant.
	Uploads *UploadQueue `json:"uploads,omitempty"`
}

// UploadQueue is the recording upload queue's state.
type UploadQueue struct {
	Pending    int   `json:"pending"`      // jobs waiting or running
	OldestAgeS int64 `json:"oldest_age_s"` // age of the oldest pending job
	Failed     int   `json:"failed"`       // jobs moved to uploads/failed since start
}

// TrunkCounts counts trunks by registration state.
type TrunkCounts struct {
	Up   int `json:"up"`
	Down int `json:"down"`
}

// StatusSnapshot is what a StatusSource reports: process facts plus counts
// broken down by tenant, so that the API narrows them itself.
type StatusSnapshot struct {
	Version   string
	StartedAt time.Time
	// Tenants holds the counts of every tenant, keyed by tenant name.
	Tenants map[string]Counts
	// Shared holds what belongs to no tenant: shared trunks, and calls or
	// registrations not (yet) attributed to a tenant. Shared trunks are
	// shown to every caller; shared calls and registrations only to a
	// caller that sees every tenant.
	Shared Counts
	// Problems are process-wide conditions that make the status degraded,
	// one line each, naming no tenant.
	Problems []string
	// Uploads is the recording upload queue; nil when there is none.
	Uploads *UploadQueue
}

// Counts are the activity counters of one tenant (or of no tenant).
type Counts struct {
	CallsActive   int
	Registrations int
	TrunksUp      int
	TrunksDown    int
}

// Tenant is one entry of GET /v1/tenants.
type Tenant struct {
	Name       string   `json:"name"`
	Domain     string   `json:"domain"`
	Accounts   int      `json:"accounts"`
	Extensions []string `json:"extensions"`
	DIDs       []string `json:"dids"`
}

// Trunk is one entry of GET /v1/trunks. Tenant is empty for a shared trunk.
type Trunk struct {
	Name         string            `json:"name"`
	Tenant       string            `json:"tenant"`
	Host         string            `json:"host"`
	Port         int               `json:"port"`
	Transport    string            `json:"transport"`
	Registration TrunkRegistration `json:"registration"`
	// Addresses are the discovered source addresses the trunk is trusted
	// from.
	Addresses []string `json:"addresses"`
}

// TrunkRegistration is the carrier registration state of a trunk.
type TrunkRegistration struct {
	Enabled   bool       `json:"enabled"`
	State     string     `json:"state"`
	ExpiresAt *time.Time `json:"expires_at"`
	LastError string     `json:"last_error"`
}

// Registration is one entry of GET /v1/registrations: a location binding of
// an account. A row with an empty Contact or an ExpiresAt in the past is
// offline; ?online= filters on that.
type Registration struct {
	Tenant    string    `json:"tenant"`
	Extension string    `json:"extension"`
	Username  string    `json:"username"`
	Contact   string    `json:"contact"`
	Source    string    `json:"source"`
	Transport string    `json:"transport"`
	UserAgent string    `json:"user_agent"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Online reports whether the binding is live at now.
func (r Registration) Online(now time.Time) bool {
	return r.Contact != "" && r.ExpiresAt.After(now)
}

// Call is one entry of GET /v1/calls: a call in progress.
type Call struct {
	ID         string          `json:"id"`
	Tenant     string          `json:"tenant"`
	Direction  calls.Direction `json:"direction"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	State      string          `json:"state"`
	StartedAt  time.Time       `json:"started_at"`
	AnsweredAt *time.Time      `json:"answered_at"`
	Legs       []CallLeg       `json:"legs"`
	// Held is true while a party has the call on hold.
	Held bool `json:"held"`
	// Cause is set once the call ended (on the event stream's call.ended).
	Cause calls.Cause `json:"cause,omitempty"`
}

// CallLeg is one leg of a call in progress.
type CallLeg struct {
	Target string `json:"target"`
	Kind   string `json:"kind"`
	State  string `json:"state"`
}

// Ban is one entry of GET /v1/security/bans.
type Ban struct {
	IP       string    `json:"ip"`
	Reason   string    `json:"reason"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	Offences int       `json:"offences"`
}

// Counters is the body of GET /v1/security/counters: the guard's packet
// and decision counters since start.
type Counters struct {
	Packets     uint64 `json:"packets"`
	Dropped     uint64 `json:"dropped"`
	Denied      uint64 `json:"denied"`
	RateLimited uint64 `json:"rate_limited"`
	Banned      uint64 `json:"banned"`
	AuthFailure uint64 `json:"auth_failures"`
	// Oversize counts datagrams dropped for exceeding security.maxDatagram
	// (included in Dropped too).
	Oversize uint64 `json:"oversize"`
	// Untracked counts fail-open events: packets admitted, and
	// authentication failures ignored, without tracking because the tracker
	// (security.maxTracked) was full of sources with failures or bans.
	Untracked uint64 `json:"untracked"`
	// Evicted counts sources without failures or bans forgotten to make
	// room in the full tracker for new ones.
	Evicted    uint64 `json:"evicted"`
	BansIssued uint64 `json:"bans_issued"`
	BansActive int    `json:"bans_active"`
	Tracked    int    `json:"tracked"`
	// AccountFailures counts wrong credentials for existing accounts,
	// from any source; AccountLocks the locks of accounts they triggered
	// (distributed password guessing); AccountRefused the valid
	// credentials refused because their account was locked and their
	// source had not authenticated for it recently; AccountsLocked the
	// accounts locked now.
	AccountFailures uint64 `json:"account_failures"`
	AccountLocks    uint64 `json:"account_locks"`
	AccountRefused  uint64 `json:"account_refused"`
	AccountsLocked  int    `json:"accounts_locked"`
}
