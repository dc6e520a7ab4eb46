// Package moh resolves music-on-hold classes: which audio a held party
// hears (DESIGN.md 5.7, the specification's moh section).
//
// Classes come from the System's moh block and each tenant's: a tenant's
// classes add to the System's and override those of the same name (its
// default too). Files are 8 kHz mono 16-bit PCM WAV, relative to the
// configuration root unless absolute, decoded once when the Library is
// loaded and shared by every call (a file named by several classes or
// tenants is read once).
//
// The class a held party hears is the one the call's InboundRoute names
// (mohClass), else the one the holding account names, else default, all
// in the holder's tenant. A class whose file is missing or unreadable falls
// back to the default class, and that to silence; each unreadable file is
// logged once, when it is loaded.
package moh

import (
	"log/slog"

	"pbx/appliance/config"
	"pbx/rtpcore"
	"pbx/sipcore/b2bua"
)

// DefaultClass is the class named by a moh block's default key.
const DefaultClass = "default"

// ExtraClass is the call's Meta.Extra key carrying the InboundRoute's
// mohClass.
const ExtraClass = "moh_class"

// Library is the decoded classes of a configuration. It is read-only once
// loaded and safe for concurrent use.
type Library struct {
	system  map[string][]int16            // class -> audio; nil: unreadable
	tenants map[string]map[string][]int16 // tenant -> its own classes
	// accounts maps tenant -> username and extension -> the account's
	// mohClass (only accounts naming one).
	accounts map[string]map[string]string
}

// Load decodes every music-on-hold file cfg names. It never fails: an
// unreadable file is logged and its class falls back at call time.
func Load(cfg *config.Config, log *slog.Logger) *Library {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Library{tenants: map[string]map[string][]int16{}, accounts: map[string]map[string]string{}}
	files := map[string][]int16{}
	read := func(owner, class, path string) []int16 {
		p := cfg.Path(path)
		if pcm, ok := files[p]; ok {
			return pcm
		}
		pcm, err := rtpcore.LoadWAV(p)
		if err == nil && len(pcm) == 0 {
			err = errEmpty
		}
		if err != nil {
			log.Warn("music-on-hold file unreadable: the class falls back to default, then silence",
				"owner", owner, "class", class, "file", path, "err", err)
			pcm = nil
		}
		files[p] = pcm
		return pcm
	}
	l.system = classes(cfg.System.MOH, "System", read)
	for _, t := range cfg.Tenants {
		if t.MOH != nil {
			l.tenants[t.Name] = classes(t.MOH, "Tenant/"+t.Name, read)
		}
	}
	for _, a := range cfg.Accounts {
		if a.MOHClass == "" {
			continue
		}
		m := l.accounts[a.Tenant]
		if m == nil {
			m = map[string]string{}
			l.accounts[a.Tenant] = m
		}
		m[a.Name] = a.MOHClass
		if a.Extension != "" {
			m["ext:"+a.Extension] = a.MOHClass
		}
	}
	return l
}

type loadErr string

func (e loadErr) Error() string { return string(e) }

// errEmpty is a WAV file without samples: nothing to loop.
const errEmpty = loadErr("no audio in the file")

// classes reads one moh block: its default and named classes.
func classes(b *config.MOH, owner string, read func(owner, class, path string) []int16) map[string][]int16 {
	out := map[string][]int16{}
	if b == nil {
		return out
	}
	if b.Default != "" {
		out[DefaultClass] = read(owner, DefaultClass, b.Default)
	}
	for name, path := range b.Classes {
		if path != "" {
			out[name] = read(owner, name, path)
		}
	}
	return out
}

// lookup returns tenant's class: its own entry, else the System's. known
// says some block names the class (its audio may be nil: unreadable).
func (l *Library) lookup(tenant, class string) (pcm []int16, known bool) {
	if t, ok := l.tenants[tenant]; ok {
		if pcm, ok := t[class]; ok {
			return pcm, true
		}
	}
	pcm, ok := l.system[class]
	return pcm, ok
}

// Class returns the audio of class for tenant: the tenant's class of that
// name, else the System's; when neither has a readable file (or class is
// empty), the default class the same way; else nil, which is silence.
func (l *Library) Class(tenant, class string) []int16 {
	if class != "" && class != DefaultClass {
		if pcm, _ := l.lookup(tenant, class); len(pcm) > 0 {
			return pcm
		}
	}
	pcm, _ := l.lookup(tenant, DefaultClass)
	if len(pcm) == 0 {
		return nil
	}
	return pcm
}

// AccountClass is the mohClass of tenant's account with that username,
// else with that extension; "" when it names none.
func (l *Library) AccountClass(tenant, username, extension string) string {
	m := l.accounts[tenant]
	if c := m[username]; username != "" && c != "" {
		return c
	}
	if extension != "" {
		return m["ext:"+extension]
	}
	return ""
}

// Music implements b2bua.MusicOnHold: the class the call's InboundRoute
// names, else the holder's account's, else default, in the holder's tenant.
func (l *Library) Music(call b2bua.CallInfo, byCaller bool) []int16 {
	tenant, class := l.Resolve(call, byCaller)
	return l.Class(tenant, class)
}

// Resolve names the tenant and class a party held on call hears when the
// caller (byCaller) or the answering party holds.
func (l *Library) Resolve(call b2bua.CallInfo, byCaller bool) (tenant, class string) {
	tenant = call.Tenant
	var username, extension string
	if byCaller {
		if call.Caller.Tenant != "" {
			tenant = call.Caller.Tenant
		}
		if call.Caller.Kind == b2bua.KindEndpoint {
			username, extension = call.Caller.Username, call.Caller.Extension
		}
	} else {
		extension = call.AnsweredBy
	}
	if c := call.Meta.Extra[ExtraClass]; c != "" {
		return tenant, c
	}
	if c := l.AccountClass(tenant, username, extension); c != "" {
		return tenant, c
	}
	return tenant, DefaultClass
}
