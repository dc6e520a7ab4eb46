package tenant

import (
	"strings"
	"time"

	"pbx/appliance/config"
)

// ID names a tenant (its metadata.name).
type ID string

// Account is one SIP account.
type Account struct {
	Tenant      ID
	Username    string
	Password    string
	Extension   string
	DisplayName string
	CallerID    config.CallerID
	MaxContacts int
	RingTimeout time.Duration
	Record      *bool
}

// Tenant is one tenant's directory entry.
type Tenant struct {
	ID               ID
	Domain           string
	Location         *time.Location
	CallerID         config.CallerID
	AllowInterTenant bool // effective: the tenant's own and the System ceiling

	Accounts   map[string]*Account // by username
	Extensions map[string]*Account // by extension
	RingGroups map[string]config.RingGroup
	DIDs       []string
}

// Directory is every tenant of a configuration.
type Directory struct {
	byName   map[ID]*Tenant
	byDomain map[string]*Tenant
	order    []*Tenant
}

// New builds the directory. cfg is assumed valid.
func New(cfg *config.Config) *Directory {
	d := &Directory{byName: map[ID]*Tenant{}, byDomain: map[string]*Tenant{}}
	loc := cfg.LocationFunc()
	for _, t := range cfg.Tenants {
		tt := &Tenant{
			ID:               ID(t.Name),
			Domain:           t.Domain,
			Location:         loc(t.Name),
			CallerID:         t.CallerID,
			AllowInterTenant: t.AllowInterTenant && cfg.System.AllowInterTenant,
			Accounts:         map[string]*Account{},
			Extensions:       map[string]*Account{},
			RingGroups:       map[string]config.RingGroup{},
		}
		for _, g := range t.RingGroups {
			tt.RingGroups[g.Name] = g
		}
		d.byName[tt.ID] = tt
		d.byDomain[strings.ToLower(t.Domain)] = tt
		d.order = append(d.order, tt)
	}
	for _, a := range cfg.Accounts {
		t := d.byName[ID(a.Tenant)]
		if t == nil {
			continue
		}
		acc := &Account{
			Tenant:      t.ID,
			Username:    a.Name,
			Password:    a.Password.Reveal(),
			Extension:   a.Extension,
			DisplayName: a.DisplayName,
			CallerID:    a.CallerID,
			MaxContacts: a.MaxContacts,
			RingTimeout: a.RingTimeout.D(),
			Record:      a.Record,
		}
		t.Accounts[acc.Username] = acc
		t.Extensions[acc.Extension] = acc
	}
	for _, r := range cfg.InboundRoutes {
		if t := d.byName[ID(r.Tenant)]; t != nil {
			t.DIDs = append(t.DIDs, r.DID)
		}
	}
	return d
}

// Tenants lists the tenants in configuration order.
func (d *Directory) Tenants() []*Tenant { return d.order }

// Get returns a tenant by id, or nil.
func (d *Directory) Get(id ID) *Tenant { return d.byName[id] }

// ByDomain returns the tenant owning a SIP domain (case-insensitive), or nil.
func (d *Directory) ByDomain(domain string) *Tenant {
	return d.byDomain[strings.ToLower(domain)]
}

// Account returns the account username of the tenant owning domain.
func (d *Directory) Account(domain, username string) (*Account, bool) {
	t := d.ByDomain(domain)
	if t == nil {
		return nil, false
	}
	a, ok := t.Accounts[username]
	return a, ok
}
