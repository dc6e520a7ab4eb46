package siptest

import (
	"strings"
	"sync"

	"pbx/sipcore/registrar"
)

// Directory is an in-memory registrar.Directory for tests.
type Directory struct {
	mu       sync.RWMutex
	domains  map[string]string // domain -> tenant
	accounts map[string]registrar.Account
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory {
	return &Directory{domains: map[string]string{}, accounts: map[string]registrar.Account{}}
}

// AddDomain makes domain a SIP domain of tenant.
func (d *Directory) AddDomain(tenant, domain string) {
	d.mu.Lock()
	d.domains[strings.ToLower(domain)] = tenant
	d.mu.Unlock()
}

// AddAccount adds an account in domain (its Tenant is filled in).
func (d *Directory) AddAccount(domain string, a registrar.Account) {
	d.mu.Lock()
	domain = strings.ToLower(domain)
	a.Tenant = d.domains[domain]
	d.accounts[domain+"\x00"+a.Username] = a
	d.mu.Unlock()
}

// ServesDomain implements registrar.Directory.
func (d *Directory) ServesDomain(domain string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.domains[strings.ToLower(domain)]
	return ok
}

// Account implements registrar.Directory.
func (d *Directory) Account(domain, username string) (registrar.Account, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.accounts[strings.ToLower(domain)+"\x00"+username]
	return a, ok
}

// AccountByExtension finds the account of extension in tenant.
func (d *Directory) AccountByExtension(tenant, ext string) (registrar.Account, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, a := range d.accounts {
		if a.Tenant == tenant && a.Extension == ext {
			return a, true
		}
	}
	return registrar.Account{}, false
}
