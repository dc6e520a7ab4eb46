package appliance

import (
	"pbx/appliance/tenant"
	"pbx/sipcore/registrar"
)

// sipDirectory lets the registrar and the digest verifier resolve credentials from
// the tenant directory: the realm is the tenant's SIP domain.
type sipDirectory struct{ dir *tenant.Directory }

func (d sipDirectory) ServesDomain(domain string) bool { return d.dir.ByDomain(domain) != nil }

func (d sipDirectory) Account(domain, username string) (registrar.Account, bool) {
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

// tenantOf names the tenant of an existing account, for the guard's count
// of authentication failures per account.
func (d sipDirectory) tenantOf(domain, username string) (string, bool) {
	a, ok := d.dir.Account(domain, username)
	if !ok {
		return "", false
	}
	return string(a.Tenant), true
}
