package api

import (
	"context"
	"slices"
)

// Principal is the authenticated caller: an operator token.
type Principal struct {
	// Name is the token's name, the only part of it that is ever logged.
	Name string
	// Scopes the token grants.
	Scopes []string
	// Tenants the token is restricted to; empty means every tenant.
	Tenants []string
}

// HasScope reports whether p grants scope.
func (p *Principal) HasScope(scope string) bool {
	return slices.Contains(p.Scopes, scope)
}

// Restricted reports whether p is limited to some tenants.
func (p *Principal) Restricted() bool { return len(p.Tenants) > 0 }

// Sees reports whether p may see data of tenant. The empty tenant (a
// shared trunk) is seen by every caller.
func (p *Principal) Sees(tenant string) bool {
	return !p.Restricted() || tenant == "" || slices.Contains(p.Tenants, tenant)
}

// SeesTenant reports whether p may see the named tenant itself (unlike
// Sees, the empty name is not a tenant).
func (p *Principal) SeesTenant(tenant string) bool {
	return tenant != "" && p.Sees(tenant)
}

// visible keeps the rows of rows that p may see: every row for a token
// of every tenant, else those of its tenants. List handlers filter what a
// store answered again through it, so nothing of another tenant leaves
// even if the store answers more than it was asked.
func visible[T any](p *Principal, rows []T, tenant func(T) string) []T {
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		if !p.Restricted() || p.SeesTenant(tenant(r)) {
			out = append(out, r)
		}
	}
	return out
}

type ctxKey int

const (
	principalKey ctxKey = iota
	requestIDKey
)

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey, p)
}

// PrincipalFrom returns the caller stored by WithPrincipal, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey).(*Principal)
	return p
}

// WithRequestID returns ctx carrying the request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey, id)
}

// RequestIDFrom returns the request id stored by WithRequestID, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}
