package config

import (
	"io"

	"go.yaml.in/yaml/v3"
)

type printedDoc struct {
	ConfigVersion string       `yaml:"configVersion"`
	Kind          string       `yaml:"kind"`
	Metadata      *printedMeta `yaml:"metadata,omitempty"`
	Spec          any          `yaml:"spec"`
}

type printedMeta struct {
	Name   string `yaml:"name"`
	Tenant string `yaml:"tenant,omitempty"`
}

// Print writes the effective configuration as YAML documents: every default filled,
// every secret shown as [redacted].
func Print(w io.Writer, c *Config) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	emit := func(kind string, m *Meta, spec any) error {
		d := printedDoc{ConfigVersion: Version, Kind: kind, Spec: spec}
		if kind != KindSystem {
			d.Metadata = &printedMeta{Name: m.Name, Tenant: m.Tenant}
		}
		return enc.Encode(d)
	}
	// The room service prints under its current key, and a tenant's room service and
	// SMTP print as in force: a tenant's own SMTP block holds only what it overrides,
	// and a nil room service means both "inherit" and "switched off".
	sys := c.System
	sys.RoomService, sys.LiveKit = c.RoomServiceFor(nil), nil
	if err := emit(KindSystem, &sys.Meta, &sys); err != nil {
		return err
	}
	for _, x := range c.Tenants {
		t := *x
		t.RoomService, t.LiveKit = c.RoomServiceFor(x), nil
		if x.SMTP != nil {
			t.SMTP = c.SMTPFor(x)
		}
		if err := emit(KindTenant, &t.Meta, &t); err != nil {
			return err
		}
	}
	for _, x := range c.Accounts {
		if err := emit(KindAccount, &x.Meta, x); err != nil {
			return err
		}
	}
	for _, x := range c.Trunks {
		if err := emit(KindTrunk, &x.Meta, x); err != nil {
			return err
		}
	}
	for _, x := range c.InboundOverrides {
		if err := emit(KindInboundOverride, &x.Meta, x); err != nil {
			return err
		}
	}
	for _, x := range c.InboundRoutes {
		if err := emit(KindInboundRoute, &x.Meta, x); err != nil {
			return err
		}
	}
	for _, x := range c.OutboundRoutes {
		if err := emit(KindOutboundRoute, &x.Meta, x); err != nil {
			return err
		}
	}
	for _, x := range c.Webhooks {
		if err := emit(KindWebhook, &x.Meta, x); err != nil {
			return err
		}
	}
	return enc.Close()
}
