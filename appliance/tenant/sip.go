package tenant

import "pbx/sipcore/registrar"

// SIPAccounts lets the registrar and the digest verifier resolve
// credentials from the tenant directory: the realm is the tenant's SIP
// domain.
type SIPAccounts struct{ dir *Directory }

// SIPAccounts returns the registrar's view of d.
func (d *Directory) SIPAccounts() SIPAccounts { return SIPAccounts{d} }

func (d SIPAccounts) ServesDomain(domain string) bool { return d.dir.ByDomain(domain) != nil }

func (d SIPAccounts) Account(domain, username string) (registrar.Account, bool) {
	a, ok := d.dir.Account(domain, username)
	if !ok {
		return registrar.Account{}, false
	}
	return registrar.Account{
		Tenant:      string(a.Tenant),
		Username:    a.Username,
		Password:    a.Password,
		Extension:   a.Extension,
		DisplayName: a.DisplayName,
		MaxContacts: a.MaxContacts,
	}, true
}

// TenantOf names the tenant of an existing account, for the guard's count
// of authentication failures per account.
func (d SIPAccounts) TenantOf(domain, username string) (string, bool) {
	a, ok := d.dir.Account(domain, username)
	if !ok {
		return "", false
	}
	return string(a.Tenant), true
}
