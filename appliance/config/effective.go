package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
)

// Environment variables that take precedence over configured secrets.
const (
	EnvRoomServiceSecret = "PBX_ROOMSERVICE_API_SECRET"
	EnvTTSAPIKey         = "PBX_TTS_API_KEY"
)

// Path resolves a path from the configuration against the configuration root.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Root, filepath.FromSlash(p))
}

// DataDir is the effective data directory (resolved against the root), or "".
func (c *Config) DataDir() string { return c.Path(c.System.DataDir) }

// Tenant returns the tenant with the given name, or nil.
func (c *Config) Tenant(name string) *Tenant {
	for _, t := range c.Tenants {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Location is the time zone of a tenant: its own, else System.timezone, else the host's.
func (c *Config) Location(tenant string) *time.Location {
	if t := c.Tenant(tenant); t != nil && t.Timezone != "" {
		if loc, err := time.LoadLocation(t.Timezone); err == nil {
			return loc
		}
	}
	if c.System.Timezone != "" {
		if loc, err := time.LoadLocation(c.System.Timezone); err == nil {
			return loc
		}
	}
	return time.Local
}

// LocationFunc returns Location as a function, with the lookups done once.
func (c *Config) LocationFunc() func(string) *time.Location {
	byTenant := map[string]*time.Location{}
	for _, t := range c.Tenants {
		byTenant[t.Name] = c.Location(t.Name)
	}
	def := c.Location("")
	return func(tenant string) *time.Location {
		if loc, ok := byTenant[tenant]; ok {
			return loc
		}
		return def
	}
}

// RoomServiceFor is the room service block in force for a tenant: the tenant's own
// block when it has one (nil when it switched the room service off with
// "roomservice: null"), else the System block. The deprecated livekit key counts as
// roomservice.
func (c *Config) RoomServiceFor(t *Tenant) *RoomService {
	if t != nil {
		switch {
		case t.Has("roomservice"):
			return t.RoomService
		case t.Has("livekit"):
			return t.LiveKit
		}
	}
	if c.System.RoomService == nil && !c.System.Has("roomservice") {
		return c.System.LiveKit
	}
	return c.System.RoomService
}

// SMTPFor is the SMTP relay in force for a tenant: the System block with the
// tenant's fields laid over it field by field. Nil when neither has a block.
func (c *Config) SMTPFor(t *Tenant) *SMTP {
	var eff SMTP
	eff.setDefaults()
	if c.System.SMTP != nil {
		eff = *c.System.SMTP
	}
	if t == nil || t.SMTP == nil {
		if c.System.SMTP == nil {
			return nil
		}
		return &eff
	}
	portSet := c.System.SMTP != nil && c.System.Has("smtp.port")
	dst, src := reflect.ValueOf(&eff).Elem(), reflect.ValueOf(t.SMTP).Elem()
	fi := fieldsOf(dst.Type())
	for _, name := range fi.names {
		if t.Has("smtp." + name) {
			dst.Field(fi.byName[name]).Set(src.Field(fi.byName[name]))
			if name == "port" {
				portSet = true
			}
		}
	}
	if !portSet {
		eff.Port = SMTPPort(eff.Security)
	}
	return &eff
}

// RecordingFor is the tenant's recording enablement and mode. A tenant block
// replaces the System's enabled and mode; enabled false collapses mode to none.
func (c *Config) RecordingFor(t *Tenant) (enabled bool, mode string) {
	r := &c.System.Recording
	if t != nil && t.Recording != nil {
		r = t.Recording
	}
	if !r.Enabled {
		return false, "none"
	}
	return true, r.Mode
}

// resolveSecrets applies secret precedence: environment, then file, then inline.
func (c *Config) resolveSecrets(l *loader) {
	getenv := l.opts.Getenv
	readFile := func(p string) (Secret, bool) {
		b, err := os.ReadFile(c.Path(p))
		if err != nil {
			return "", false // reported by the validator
		}
		return Secret(strings.TrimRight(string(b), "\r\n")), true
	}
	rs := func(r *RoomService) {
		if r == nil {
			return
		}
		r.Secret = r.APISecret
		if r.APISecretFile != "" {
			if s, ok := readFile(r.APISecretFile); ok {
				r.Secret = s
			}
		}
		if env := getenv(EnvRoomServiceSecret); env != "" {
			r.Secret = Secret(env)
		}
	}
	rs(c.System.RoomService)
	rs(c.System.LiveKit)
	for _, t := range c.Tenants {
		rs(t.RoomService)
		rs(t.LiveKit)
	}
	if tts := c.System.TTS; tts != nil {
		tts.Key = tts.APIKey
		if tts.APIKeyFile != "" {
			if s, ok := readFile(tts.APIKeyFile); ok {
				tts.Key = s
			}
		}
		if env := getenv(EnvTTSAPIKey); env != "" {
			tts.Key = Secret(env)
		}
	}
	for _, w := range c.Webhooks {
		w.Key = w.Secret
		if w.SecretFile != "" {
			if s, ok := readFile(w.SecretFile); ok {
				w.Key = s
			}
		}
	}
}
