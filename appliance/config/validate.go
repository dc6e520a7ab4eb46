package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"
)

// validator runs every check of the specification over a decoded configuration.
// Per-document checks come first, then cross-document ones; none stops the others.
type validator struct {
	cfg *Config
	l   *loader

	tenants    map[string]*Tenant
	trunks     map[string]*Trunk
	listeners  map[string]*Listener
	extensions map[string]map[string]*Account // tenant -> extension -> account
	ringGroups map[string]map[string]bool     // tenant -> ring group name
	mailboxes  map[string]map[string]bool     // tenant -> mailbox extension
}

func (v *validator) errf(m *Meta, path, rule, format string, args ...any) {
	mustRule(rule)
	v.l.add(m, path, rule, fmt.Sprintf(format, args...))
}

func (v *validator) warnf(m *Meta, path, rule, format string, args ...any) {
	mustRule(rule)
	v.l.warn(m, path, rule, fmt.Sprintf(format, args...))
}

func (v *validator) run() {
	v.index()
	v.system()
	for _, t := range v.cfg.Trunks {
		v.trunk(t)
	}
	for _, t := range v.cfg.Tenants {
		v.tenant(t)
	}
	for _, a := range v.cfg.Accounts {
		v.account(a)
	}
	for _, r := range v.cfg.InboundRoutes {
		v.inboundRoute(r)
	}
	for _, o := range v.cfg.InboundOverrides {
		v.override(o)
	}
	for _, r := range v.cfg.OutboundRoutes {
		v.outboundRoute(r)
	}
	for _, w := range v.cfg.Webhooks {
		v.webhook(w)
	}
	v.crossDocument()
}

// index builds the lookup tables the checks use and reports duplicate names.
func (v *validator) index() {
	c := v.cfg
	v.tenants = map[string]*Tenant{}
	v.trunks = map[string]*Trunk{}
	v.listeners = map[string]*Listener{}
	v.extensions = map[string]map[string]*Account{}
	v.ringGroups = map[string]map[string]bool{}
	v.mailboxes = map[string]map[string]bool{}

	seen := map[string]*Meta{}
	dup := func(m *Meta) bool {
		if m.Name == "" {
			return false
		}
		key := m.Kind + "\x00" + m.Tenant + "\x00" + m.Name
		if first, ok := seen[key]; ok {
			scope := ""
			if m.Tenant != "" {
				scope = " in tenant " + m.Tenant
			}
			v.errf(m, "metadata.name", "doc.nameDuplicate", "%s %q is defined twice%s; the first is at %s:%d", m.Kind, m.Name, scope, first.File, first.Line)
			return true
		}
		seen[key] = m
		return false
	}
	for _, t := range c.Tenants {
		if !dup(&t.Meta) {
			v.tenants[t.Name] = t
		}
	}
	for _, t := range c.Trunks {
		if !dup(&t.Meta) {
			v.trunks[t.Name] = t
		}
	}
	for _, o := range c.InboundOverrides {
		dup(&o.Meta)
	}
	for _, r := range c.OutboundRoutes {
		dup(&r.Meta)
	}
	for _, r := range c.InboundRoutes {
		dup(&r.Meta)
	}
	for _, w := range c.Webhooks {
		dup(&w.Meta)
	}
	for _, a := range c.Accounts {
		if dup(&a.Meta) || a.Extension == "" {
			continue
		}
		exts := v.extensions[a.Tenant]
		if exts == nil {
			exts = map[string]*Account{}
			v.extensions[a.Tenant] = exts
		}
		if first, ok := exts[a.Extension]; ok {
			v.errf(&a.Meta, "extension", "account.extensionDuplicate", "extension %q is already used by Account/%s (%s:%d)", a.Extension, first.displayName(), first.File, first.Line)
			continue
		}
		exts[a.Extension] = a
	}
	for _, t := range c.Tenants {
		groups := map[string]bool{}
		for _, g := range t.RingGroups {
			if g.Name != "" {
				groups[g.Name] = true
			}
		}
		v.ringGroups[t.Name] = groups
		boxes := map[string]bool{}
		for _, b := range t.Mailboxes {
			if b.Extension != "" {
				boxes[b.Extension] = true
			}
		}
		v.mailboxes[t.Name] = boxes
	}
	for i := range c.System.SIP.Transports {
		l := &c.System.SIP.Transports[i]
		if _, ok := v.listeners[l.ID]; !ok {
			v.listeners[l.ID] = l
		}
	}
}

func (v *validator) knownTenant(m *Meta, path, name string) bool {
	if _, ok := v.tenants[name]; ok {
		return true
	}
	v.errf(m, path, "doc.unknownTenant", "unknown tenant %q%s", name, suggestFrom(name, v.tenantNames(), "tenants"))
	return false
}

// suggestFrom is suggest for names that documents define: with none defined, it
// says so rather than suggesting nothing.
func suggestFrom(name string, names []string, what string) string {
	if len(names) == 0 {
		return " (no " + what + " are defined)"
	}
	return suggest(name, names)
}

func (v *validator) tenantNames() []string { return slices.Sorted(maps.Keys(v.tenants)) }
func (v *validator) listenerIDs() []string { return slices.Sorted(maps.Keys(v.listeners)) }
func (v *validator) trunkNames() []string  { return slices.Sorted(maps.Keys(v.trunks)) }

func (v *validator) port(m *Meta, path, rule string, p int, zeroOK bool) {
	if p == 0 && zeroOK {
		return
	}
	if p < 1 || p > 65535 {
		v.errf(m, path, rule, "port %d is out of range (1-65535)", p)
	}
}

func (v *validator) nonNegative(m *Meta, path, rule string, d Duration) {
	if d < 0 {
		v.errf(m, path, rule, "must not be negative (%s)", d)
	}
}

// readable checks that a file named by the configuration can be read.
func (v *validator) readable(m *Meta, path, rule, file string) {
	if file == "" {
		return
	}
	f, err := os.Open(v.cfg.Path(file))
	if err != nil {
		v.errf(m, path, rule, "cannot read %s: %v", file, cleanErr(err))
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		v.errf(m, path, rule, "%s is a directory, not a file", file)
	}
}

// cleanErr drops the path an *os.PathError repeats.
func cleanErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func (v *validator) timezone(m *Meta, path, tz string) {
	if tz == "" || tz == "Local" {
		return
	}
	if _, err := time.LoadLocation(tz); err != nil {
		v.errf(m, path, "timezone", "unknown time zone %q (use an IANA name such as Europe/Berlin)", tz)
	}
}

// prefixes checks a list of address prefixes or bare addresses.
func (v *validator) prefixes(m *Meta, path, rule string, list []string) {
	for i, s := range list {
		if !validPrefix(s) {
			v.errf(m, fmt.Sprintf("%s[%d]", path, i), rule, "%q is neither an address nor a prefix such as 203.0.113.0/24", s)
		}
	}
}

func validPrefix(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

func (v *validator) system() {
	s := &v.cfg.System
	m := &s.Meta

	// sip
	v.port(m, "sip.bindPort", "sip.port", s.SIP.BindPort, false)
	if s.SIP.BindHost != "" && net.ParseIP(s.SIP.BindHost) == nil {
		v.errf(m, "sip.bindHost", "sip.bindHost", "%q is not an IP address", s.SIP.BindHost)
	}
	if len(s.SIP.Transports) == 0 && s.Has("sip.transports") {
		v.errf(m, "sip.transports", "sip.transport", "at least one listener is required")
	}
	hasCert := s.SIP.TLS != nil && (s.SIP.TLS.CertFile != "" || len(s.SIP.TLS.Certificates) > 0)
	ids := map[string]string{}
	type sock struct {
		proto, host string
		port        int
		path        string
	}
	var socks []sock
	for i, l := range s.SIP.Transports {
		p := fmt.Sprintf("sip.transports[%d]", i)
		tp := p
		if !l.Bare {
			tp = p + ".transport"
		}
		switch l.Transport {
		case "udp", "tcp", "tls", "wss":
		case "":
			v.errf(m, p, "sip.transport", "transport is required (udp, tcp, tls or wss)")
			continue
		default:
			v.errf(m, tp, "sip.transport", "unsupported transport %q; use udp, tcp, tls or wss%s", l.Transport, suggest(l.Transport, []string{"udp", "tcp", "tls", "wss"}))
			continue
		}
		switch l.SRTP {
		case "off", "sdes", "dtls":
			if l.SRTP != "off" {
				v.warnf(m, p+".srtp", "inert.srtp", "srtp %q is accepted but never applied: every call is plain RTP", l.SRTP)
			}
		default:
			v.errf(m, p+".srtp", "sip.srtp", "srtp must be off, sdes or dtls, not %q", l.SRTP)
		}
		if (l.Transport == "tls" || l.Transport == "wss" || l.SRTP == "dtls") && !hasCert {
			what, at := "a "+l.Transport+" listener", tp
			if l.SRTP == "dtls" {
				what, at = "srtp: dtls", p+".srtp"
			}
			v.errf(m, at, "sip.tlsCertificate", "%s needs a certificate in sip.tls (certFile and keyFile)", what)
		}
		if l.Transport == "tls" || l.Transport == "wss" {
			v.warnf(m, tp, "inert.tlsListener", "a %s listener validates but fails to bind at startup: only udp and tcp listeners work", l.Transport)
		}
		// An inherited bindPort or bindHost is checked once, at sip.bindPort and sip.bindHost.
		if m.Has(p + ".bindPort") {
			v.port(m, p+".bindPort", "sip.port", l.BindPort, false)
		}
		if m.Has(p+".bindHost") && net.ParseIP(l.BindHost) == nil {
			v.errf(m, p+".bindHost", "sip.bindHost", "%q is not an IP address", l.BindHost)
		}
		if first, ok := ids[l.ID]; ok {
			v.errf(m, p+".id", "sip.listenerDuplicateId", "listener id %q is already used by %s", l.ID, first)
		} else {
			ids[l.ID] = p
		}
		proto := "tcp"
		if l.Transport == "udp" {
			proto = "udp"
		}
		for _, o := range socks {
			if o.proto == proto && o.port == l.BindPort && (o.host == l.BindHost || isWildcard(o.host) || isWildcard(l.BindHost)) {
				v.errf(m, p, "sip.listenerClash", "binds %s %s:%d, which %s already binds", proto, l.BindHost, l.BindPort, o.path)
				break
			}
		}
		socks = append(socks, sock{proto, l.BindHost, l.BindPort, p})
	}
	v.sipTCP(m, &s.SIP.TCP)
	v.digestAlgorithms(m)
	if s.SIP.TLS != nil {
		v.tls(m, "sip.tls", s.SIP.TLS)
		v.warnf(m, "sip.tls", "inert.sipTLS", "sip.tls is accepted but not applied to SIP (only api.tls is used)")
	}

	// media
	if len(s.Media.Codecs) == 0 {
		v.errf(m, "media.codecs", "media.codec", "at least one codec is required (alaw, ulaw)")
	}
	codecSeen := map[string]bool{}
	for i, c := range s.Media.Codecs {
		p := fmt.Sprintf("media.codecs[%d]", i)
		if c != "alaw" && c != "ulaw" {
			v.errf(m, p, "media.codec", "unsupported codec %q: only alaw and ulaw (no transcoding)", c)
		} else if codecSeen[c] {
			v.errf(m, p, "media.codec", "codec %q is listed twice", c)
		}
		codecSeen[c] = true
	}
	minSet, maxSet := s.Has("media.rtpPortMin"), s.Has("media.rtpPortMax")
	switch {
	case minSet != maxSet:
		p, missing := "media.rtpPortMin", "rtpPortMax"
		if maxSet {
			p, missing = "media.rtpPortMax", "rtpPortMin"
		}
		v.errf(m, p, "media.rtpPortPair", "rtpPortMin and rtpPortMax must be set together (%s is missing)", missing)
	case minSet:
		v.port(m, "media.rtpPortMin", "media.rtpPortRange", s.Media.RTPPortMin, false)
		v.port(m, "media.rtpPortMax", "media.rtpPortRange", s.Media.RTPPortMax, false)
		if s.Media.RTPPortMax <= s.Media.RTPPortMin {
			v.errf(m, "media.rtpPortMax", "media.rtpPortOrder", "rtpPortMax (%d) must be greater than rtpPortMin (%d)", s.Media.RTPPortMax, s.Media.RTPPortMin)
		}
	}
	switch s.Media.SAVPProfile {
	case "":
	case "always", "mirror":
		v.warnf(m, "media.savpProfile", "inert.savpProfile", "savpProfile is validated but never applied: every call is plain RTP")
	default:
		v.errf(m, "media.savpProfile", "media.savpProfile", "savpProfile must be always or mirror, not %q", s.Media.SAVPProfile)
	}
	v.nonNegative(m, "media.timeout", "media.timeout", s.Media.Timeout)
	if q := s.Media.PortQuarantine; q < 0 || q > Duration(time.Minute) {
		v.errf(m, "media.portQuarantine", "media.portQuarantine", "must be between 0s and 1m (%s): a port resting longer only shrinks the range", q)
	}
	if s.Media.ExternalIP != "" && net.ParseIP(s.Media.ExternalIP) == nil {
		v.errf(m, "media.externalIp", "media.externalIp", "%q is not an IP address", s.Media.ExternalIP)
	}

	v.moh(m, "moh", s.MOH)
	v.timezone(m, "timezone", s.Timezone)
	if s.DefaultTrunk != "" {
		if _, ok := v.trunks[s.DefaultTrunk]; !ok {
			v.errf(m, "defaultTrunk", "system.defaultTrunk", "unknown trunk %q%s", s.DefaultTrunk, suggestFrom(s.DefaultTrunk, v.trunkNames(), "trunks"))
		}
	}

	// dataDir, cdr, recording, storage, voicemail
	if s.DataDir == "" {
		var needs []string
		if s.CDR.Enabled {
			needs = append(needs, "cdr.enabled")
		}
		if s.Recording.Enabled {
			needs = append(needs, "recording.enabled")
		}
		if s.Voicemail.Enabled {
			needs = append(needs, "voicemail.enabled")
		}
		// Without a System document the problem is reported where the need is.
		at, path, hint := m, "dataDir", ""
		blame := func(t *Tenant, p string) {
			if at.File == "" {
				at, path, hint = &t.Meta, p, "; set dataDir in a System document"
			}
		}
		for _, t := range v.cfg.Tenants {
			if t.Recording != nil && t.Recording.Enabled {
				needs = append(needs, "recording on Tenant/"+t.Name)
				blame(t, "recording.enabled")
				break
			}
		}
		for _, t := range v.cfg.Tenants {
			if len(t.Mailboxes) > 0 {
				needs = append(needs, "mailboxes on Tenant/"+t.Name)
				blame(t, "mailboxes")
				break
			}
		}
		if len(needs) > 0 {
			v.errf(at, path, "dataDir.required", "dataDir is required because of %s%s", strings.Join(needs, ", "), hint)
		}
	}
	v.nonNegative(m, "cdr.retention", "cdr.retention", s.CDR.Retention)
	v.recording(m, "recording", &s.Recording, true)
	if s.Storage != nil {
		if s.Storage.S3 == nil {
			v.errf(m, "storage", "s3.bucket", "storage needs an s3 block with at least a bucket")
		} else {
			v.s3(m, "storage.s3", s.Storage.S3)
		}
	}
	if s.Recording.Storage == "s3" && (s.Storage == nil || s.Storage.S3 == nil) {
		v.errf(m, "recording.storage", "recording.s3Missing", "storage: s3 needs a storage.s3 block")
	}
	vm := &s.Voicemail
	v.nonNegative(m, "voicemail.maxMessage", "voicemail.negative", vm.MaxMessage)
	v.nonNegative(m, "voicemail.minMessage", "voicemail.negative", vm.MinMessage)
	v.nonNegative(m, "voicemail.silenceTimeout", "voicemail.negative", vm.SilenceTimeout)
	v.nonNegative(m, "voicemail.retention", "voicemail.negative", vm.Retention)
	if vm.MinMessage > vm.MaxMessage && vm.MaxMessage >= 0 {
		v.errf(m, "voicemail.minMessage", "voicemail.minMax", "minMessage (%s) is longer than maxMessage (%s)", vm.MinMessage, vm.MaxMessage)
	}
	if vm.PromptsDir != "" {
		if err := readableDir(v.cfg.Path(vm.PromptsDir)); err != nil {
			v.errf(m, "voicemail.promptsDir", "voicemail.promptsDir", "promptsDir %s is not a readable directory: %v", vm.PromptsDir, err)
		}
	}
	if s.SMTP != nil {
		v.smtp(m, "smtp", s.SMTP)
	}
	if s.TTS != nil {
		if s.TTS.Provider != "" && s.TTS.Provider != "ttsprovider" {
			v.errf(m, "tts.provider", "tts.provider", "unknown provider %q (only ttsprovider is accepted)", s.TTS.Provider)
		}
		v.readable(m, "tts.apiKeyFile", "secret.file", s.TTS.APIKeyFile)
	}
	if s.Webhooks.Concurrency > 64 || s.Webhooks.Concurrency < 0 {
		v.errf(m, "webhooks.concurrency", "webhooks.concurrency", "concurrency must be between 0 and 64, not %d", s.Webhooks.Concurrency)
	}
	v.nonNegative(m, "webhooks.timeout", "webhooks.negative", s.Webhooks.Timeout)
	v.nonNegative(m, "webhooks.maxAttemptAge", "webhooks.negative", s.Webhooks.MaxAttemptAge)
	if s.API.Enabled {
		v.api(m, &s.API)
	}
	v.security(m, &s.Security)
	v.roomService(m, s.RoomService, s.LiveKit)
}

func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func readableDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return cleanErr(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return cleanErr(err)
	}
	if !st.IsDir() {
		return fmt.Errorf("not a directory")
	}
	if _, err := f.Readdirnames(1); err != nil && err.Error() != "EOF" {
		return cleanErr(err)
	}
	return nil
}

// sipTCP checks sip.tcp: every bound positive, the per-source cap within
// the total.
func (v *validator) sipTCP(m *Meta, t *SIPTCP) {
	if t.IdleTimeout <= 0 {
		v.errf(m, "sip.tcp.idleTimeout", "sip.tcp", "idleTimeout must be positive")
	}
	if t.MaxConnections <= 0 {
		v.errf(m, "sip.tcp.maxConnections", "sip.tcp", "maxConnections must be positive")
	}
	if t.MaxPerSource <= 0 {
		v.errf(m, "sip.tcp.maxPerSource", "sip.tcp", "maxPerSource must be positive")
	} else if t.MaxConnections > 0 && t.MaxPerSource > t.MaxConnections {
		v.errf(m, "sip.tcp.maxPerSource", "sip.tcp", "maxPerSource %d is above maxConnections %d", t.MaxPerSource, t.MaxConnections)
	}
}

func (v *validator) tls(m *Meta, path string, t *TLS) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		missing := "keyFile"
		if t.CertFile == "" {
			missing = "certFile"
		}
		v.errf(m, path, "tls.pair", "certFile and keyFile must be set together (%s is missing)", missing)
	}
	v.readable(m, path+".certFile", "tls.file", t.CertFile)
	v.readable(m, path+".keyFile", "tls.file", t.KeyFile)
	for i, c := range t.Certificates {
		p := fmt.Sprintf("%s.certificates[%d]", path, i)
		if c.CertFile == "" || c.KeyFile == "" {
			v.errf(m, p, "tls.pair", "a certificate needs both certFile and keyFile")
		}
		v.readable(m, p+".certFile", "tls.file", c.CertFile)
		v.readable(m, p+".keyFile", "tls.file", c.KeyFile)
	}
	v.readable(m, path+".clientCaFile", "tls.file", t.ClientCAFile)
	if t.MinVersion != "1.2" && t.MinVersion != "1.3" {
		v.errf(m, path+".minVersion", "tls.minVersion", "minVersion must be \"1.2\" or \"1.3\", not %q", t.MinVersion)
	}
	if t.ReloadEvery <= 0 {
		v.errf(m, path+".reloadEvery", "tls.reloadEvery", "reloadEvery must be positive")
	}
}

func (v *validator) moh(m *Meta, path string, moh *MOH) {
	if moh == nil {
		return
	}
	v.readable(m, path+".default", "moh.file", moh.Default)
	names := make([]string, 0, len(moh.Classes))
	for n := range moh.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if moh.Classes[n] == "" {
			v.errf(m, path+".classes."+n, "moh.file", "class %s needs the path of a WAV file", n)
			continue
		}
		v.readable(m, path+".classes."+n, "moh.file", moh.Classes[n])
	}
}

var recordingModes = []string{"none", "inbound", "outbound", "internal", "all"}

func (v *validator) recording(m *Meta, path string, r *Recording, system bool) {
	if !contains(recordingModes, r.Mode) {
		v.errf(m, path+".mode", "recording.mode", "mode must be one of %s, not %q", strings.Join(recordingModes, ", "), r.Mode)
	}
	if r.Storage != "local" && r.Storage != "s3" {
		v.errf(m, path+".storage", "recording.storage", "storage must be local or s3, not %q", r.Storage)
	}
	if r.Retention < 0 {
		v.errf(m, path+".retention", "recording.negative", "retention must not be negative")
	}
	if r.MaxPending < 0 {
		v.errf(m, path+".maxPending", "recording.negative", "maxPending must not be negative")
	}
	if !system {
		for _, k := range []string{"storage", "keepLocal", "maxPending", "retention", "beep"} {
			if m.Has(path + "." + k) {
				v.warnf(m, path+"."+k, "inert.tenantRecording", "a tenant's recording block takes only enabled and mode; %s is ignored", k)
			}
		}
		return
	}
	if m.Has(path + ".retention") {
		v.warnf(m, path+".retention", "inert.recordingRetention", "recording.retention is validated but has no effect: no janitor removes recordings")
	}
	if r.Beep {
		v.warnf(m, path+".beep", "inert.recordingBeep", "recording.beep is validated but has no effect: no tone is played")
	}
	if m.Has(path+".maxPending") && r.Storage != "s3" {
		v.warnf(m, path+".maxPending", "inert.maxPending", "maxPending has effect only with storage: s3")
	}
}

var keyPrefixTokens = []string{"{tenant}", "{callid}", "{ext}", "{kind}", "{yyyy}", "{mm}", "{dd}", "{HH}", "{MM}"}

var tokenRE = regexp.MustCompile(`\{[^{}]*\}`)

func (v *validator) s3(m *Meta, path string, s *S3) {
	if s.Bucket == "" {
		v.errf(m, path, "s3.bucket", "bucket is required")
	}
	if s.Region == "" && s.Endpoint == "" {
		v.errf(m, path, "s3.region", "region is required unless endpoint is set")
	}
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.errf(m, path+".endpoint", "s3.endpoint", "endpoint must be an http:// or https:// URL, not %q", s.Endpoint)
		}
	}
	kp := s.KeyPrefix
	for _, tok := range tokenRE.FindAllString(kp, -1) {
		if !contains(keyPrefixTokens, tok) {
			v.errf(m, path+".keyPrefix", "s3.keyPrefix", "unknown token %s in keyPrefix%s (tokens are case-sensitive: %s)", tok, suggest(tok, keyPrefixTokens), strings.Join(keyPrefixTokens, " "))
		}
	}
	if strings.HasPrefix(kp, "/") {
		v.errf(m, path+".keyPrefix", "s3.keyPrefix", "keyPrefix must not start with /")
	}
	for _, seg := range strings.Split(kp, "/") {
		if seg == ".." {
			v.errf(m, path+".keyPrefix", "s3.keyPrefix", "keyPrefix must not contain ..")
			break
		}
	}
	switch s.SSE {
	case "", "AES256":
	case "aws:kms":
		if s.KMSKeyID == "" {
			v.errf(m, path+".sse", "s3.kmsKeyId", "sse aws:kms needs kmsKeyId")
		}
	default:
		v.errf(m, path+".sse", "s3.sse", "sse must be empty, AES256 or aws:kms, not %q", s.SSE)
	}
	if (s.AccessKeyID == "") != (s.SecretAccessKey == "") {
		missing := "secretAccessKey"
		if s.AccessKeyID == "" {
			missing = "accessKeyId"
		}
		v.errf(m, path, "s3.credentials", "accessKeyId and secretAccessKey must be set together, or neither (%s is missing)", missing)
	}
	v.nonNegative(m, path+".timeout", "s3.negative", s.Timeout)
	v.nonNegative(m, path+".maxRetryAge", "s3.negative", s.MaxRetryAge)
	if m.Has(path + ".maxRetryAge") {
		v.warnf(m, path+".maxRetryAge", "inert.maxRetryAge", "maxRetryAge is validated but has no effect: uploads give up after a fixed 7 days")
	}
}

func (v *validator) smtp(m *Meta, path string, s *SMTP) {
	switch s.Security {
	case "none", "starttls", "tls":
	default:
		v.errf(m, path+".security", "smtp.security", "security must be none, starttls or tls, not %q", s.Security)
	}
	if s.From != "" {
		if a, err := mail.ParseAddress(s.From); err != nil || a.Address == "" {
			v.errf(m, path+".from", "smtp.from", "from %q is not an RFC 5322 address", s.From)
		}
	}
	if s.Host != "" && s.From == "" {
		v.errf(m, path+".host", "smtp.fromRequired", "host is set, so from is required")
	}
	v.port(m, path+".port", "smtp.port", s.Port, true)
	v.nonNegative(m, path+".timeout", "smtp.negative", s.Timeout)
	v.nonNegative(m, path+".maxAttach", "smtp.negative", s.MaxAttach)
	for _, f := range []struct{ key, text string }{{"subject", s.Subject}, {"body", s.Body}} {
		if f.text == "" {
			continue
		}
		if _, err := template.New(f.key).Parse(f.text); err != nil {
			v.errf(m, path+"."+f.key, "smtp.template", "invalid template: %v", strings.TrimPrefix(err.Error(), "template: "))
		}
	}
}

// Scopes are the operator token scopes.
var Scopes = []string{"status:read", "cdr:read", "recordings:read", "voicemail:read", "voicemail:delete", "security:read", "mobile:read", "mobile:manage", "operate"}

var hashRE = regexp.MustCompile(`^sha256:[0-9a-fA-F]{64}$`)

func (v *validator) api(m *Meta, a *API) {
	if len(a.Tokens) == 0 {
		v.errf(m, "api.tokens", "api.noTokens", "the API is enabled with no tokens; add at least one under api.tokens")
	}
	if !isLoopbackHost(a.BindHost) && a.TLS == nil {
		v.errf(m, "api.bindHost", "api.wideBind", "bindHost %q is not loopback, so api.tls is required (certFile and keyFile)", a.BindHost)
	}
	if a.BindHost != "" && net.ParseIP(a.BindHost) == nil && a.BindHost != "localhost" {
		v.errf(m, "api.bindHost", "api.bindHost", "%q is not an IP address", a.BindHost)
	}
	if a.TLS != nil {
		if a.TLS.CertFile == "" && len(a.TLS.Certificates) == 0 {
			v.errf(m, "api.tls", "api.tlsCertificate", "api.tls needs a certificate: certFile and keyFile, or certificates")
		}
		v.tls(m, "api.tls", a.TLS)
	}
	v.port(m, "api.bindPort", "api.bindPort", a.BindPort, true)
	if !m.Has("api.bindPort") || a.BindPort == 0 {
		v.warnf(m, "api.bindPort", "pitfall.bindPort", "bindPort is absent or zero: the API binds an ephemeral port, shown only in the startup log line")
	}
	if m.Has("api.rateLimit.burst") && !m.Has("api.rateLimit.requestsPerMinute") {
		v.warnf(m, "api.rateLimit.burst", "pitfall.burst", "burst is ignored unless requestsPerMinute is also set: the default 300/60 pair stays")
	}
	if a.RateLimit.RequestsPerMinute < 0 {
		v.warnf(m, "api.rateLimit.requestsPerMinute", "pitfall.rateNegative", "a negative requestsPerMinute disables the per-token rate limiter")
	}
	for i, o := range a.CORS.AllowedOrigins {
		p := fmt.Sprintf("api.cors.allowedOrigins[%d]", i)
		u, err := url.Parse(o)
		if o == "*" || strings.Contains(o, "*") {
			v.errf(m, p, "api.corsOrigin", "origins are exact strings; wildcards are not accepted")
		} else if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			v.errf(m, p, "api.corsOrigin", "%q is not an origin such as https://admin.example.com", o)
		}
	}
	if a.Recordings.Presign {
		v.warnf(m, "api.recordings.presign", "inert.presign", "presign is on: every recording audio request answers 500 (no fallback to streaming)")
	}
	if m.Has("api.recordings.presignTtl") {
		v.warnf(m, "api.recordings.presignTtl", "inert.presignTtl", "presignTtl is accepted but has no effect")
	}

	names := map[string]int{}
	secrets := map[string]int{}
	for i, t := range a.Tokens {
		p := fmt.Sprintf("api.tokens[%d]", i)
		if t.Name == "" {
			v.errf(m, p, "token.name", "a token needs a name (it is what logs show)")
		} else if j, ok := names[t.Name]; ok {
			v.errf(m, p+".name", "token.nameDuplicate", "token name %q is already used by api.tokens[%d]", t.Name, j)
		} else {
			names[t.Name] = i
		}
		var digest string
		switch {
		case t.Token != "" && t.Hash != "":
			v.errf(m, p, "token.secret", "set exactly one of token and hash, not both")
		case t.Token == "" && t.Hash == "":
			v.errf(m, p, "token.secret", "set exactly one of token and hash")
		case t.Hash != "":
			if !hashRE.MatchString(t.Hash) {
				v.errf(m, p+".hash", "token.hash", "hash must be sha256: followed by 64 hex characters (pbxctl token hash makes one)")
			} else {
				digest = strings.ToLower(strings.TrimPrefix(t.Hash, "sha256:"))
			}
		default:
			if len(t.Token) < 32 {
				v.errf(m, p+".token", "token.short", "a plaintext token must be at least 32 characters (it has %d)", len(t.Token))
			}
			sum := sha256.Sum256([]byte(t.Token))
			digest = hex.EncodeToString(sum[:])
		}
		if digest != "" {
			if j, ok := secrets[digest]; ok {
				v.errf(m, p, "token.shared", "shares its secret with api.tokens[%d]; every token needs its own", j)
			} else {
				secrets[digest] = i
			}
		}
		if len(t.Scopes) == 0 {
			v.errf(m, p+".scopes", "token.scopes", "a token needs at least one scope (%s)", strings.Join(Scopes, ", "))
		}
		for j, sc := range t.Scopes {
			if !contains(Scopes, sc) {
				v.errf(m, fmt.Sprintf("%s.scopes[%d]", p, j), "token.scope", "unknown scope %q%s", sc, suggest(sc, Scopes))
			}
		}
		for j, tn := range t.Tenants {
			if _, ok := v.tenants[tn]; !ok {
				v.errf(m, fmt.Sprintf("%s.tenants[%d]", p, j), "token.tenant", "unknown tenant %q%s", tn, suggestFrom(tn, v.tenantNames(), "tenants"))
			}
		}
		if t.Expires != "" {
			if _, err := ParseExpires(t.Expires); err != nil {
				v.errf(m, p+".expires", "token.expires", "expires %q is neither YYYY-MM-DD nor an RFC 3339 timestamp", t.Expires)
			}
		}
	}
}

// ParseExpires reads a token's expires value: YYYY-MM-DD (the end of that day,
// UTC) or an RFC 3339 timestamp.
func ParseExpires(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, err
	}
	return d.Add(24*time.Hour - time.Nanosecond), nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (v *validator) security(m *Meta, s *Security) {
	neg := func(path string, bad bool) {
		if bad {
			v.errf(m, path, "security.negative", "must not be negative")
		}
	}
	neg("security.packetRate", s.PacketRate < 0)
	neg("security.packetBurst", s.PacketBurst < 0)
	neg("security.authFailures", s.AuthFailures < 0)
	neg("security.maxTracked", s.MaxTracked < 0)
	neg("security.authWindow", s.AuthWindow < 0)
	neg("security.banDuration", s.BanDuration < 0)
	neg("security.banMax", s.BanMax < 0)
	neg("security.accountFailures", s.AccountFailures < 0)
	neg("security.accountWindow", s.AccountWindow < 0)
	neg("security.accountLock", s.AccountLock < 0)
	if s.BanDuration > s.BanMax {
		v.errf(m, "security.banDuration", "security.banDuration", "banDuration (%s) is longer than banMax (%s)", s.BanDuration, s.BanMax)
	}
	v.prefixes(m, "security.allow", "security.prefix", s.Allow)
	v.prefixes(m, "security.deny", "security.prefix", s.Deny)
	v.prefixes(m, "security.acl.register.allow", "security.prefix", s.ACL.Register.Allow)
	v.prefixes(m, "security.acl.register.deny", "security.prefix", s.ACL.Register.Deny)
	v.prefixes(m, "security.acl.invite.allow", "security.prefix", s.ACL.Invite.Allow)
	v.prefixes(m, "security.acl.invite.deny", "security.prefix", s.ACL.Invite.Deny)
	if m.Has("security.acl") {
		v.warnf(m, "security.acl", "inert.acl", "security.acl is validated but never read")
	}
	if s.RequireSRTP {
		v.warnf(m, "security.requireSrtp", "inert.requireSrtp", "requireSrtp is validated but never read: every call is plain RTP")
	}
	v.limits(m, "security.limits", &s.Limits)
}

func (v *validator) limits(m *Meta, path string, l *Limits) {
	for _, f := range []struct {
		key string
		bad bool
	}{
		{"maxConcurrentCalls", l.MaxConcurrentCalls < 0},
		{"maxConcurrentPerAccount", l.MaxConcurrentPerAccount < 0},
		{"maxOutboundPerMinute", l.MaxOutboundPerMinute < 0},
		{"outboundMinutesPerHour", l.OutboundMinutesPerHour < 0},
		{"outboundMinutesPerMonth", l.OutboundMinutesPerMonth < 0},
	} {
		if f.bad {
			v.errf(m, path+"."+f.key, "security.limits", "must not be negative")
		}
	}
	for i, p := range l.BlockedPrefixes {
		if strings.TrimSpace(p) == "" {
			v.errf(m, fmt.Sprintf("%s.blockedPrefixes[%d]", path, i), "security.blockedPrefix", "an empty blocked prefix would block every number")
		}
	}
}

func (v *validator) roomService(m *Meta, rs, lk *RoomService) {
	path := "roomservice"
	if lk != nil || m.Has("livekit") {
		if rs != nil || m.Has("roomservice") {
			v.errf(m, "livekit", "roomservice.livekitBoth", "livekit and roomservice are both set; keep only roomservice (pbxctl config migrate rewrites livekit)")
			return
		}
		v.warnf(m, "livekit", "deprecated.livekit", "the livekit key is deprecated; it is read as roomservice (pbxctl config migrate rewrites it)")
		rs, path = lk, "livekit"
	}
	if rs == nil {
		return
	}
	for _, f := range []struct{ key, val string }{{"url", rs.URL}, {"apiKey", rs.APIKey}, {"sipHost", rs.SIPHost}} {
		if f.val == "" {
			v.errf(m, path, "roomservice.required", "%s is required", f.key)
		}
	}
	if rs.URL != "" {
		if u, err := url.Parse(rs.URL); err != nil || u.Host == "" || !contains([]string{"http", "https", "ws", "wss"}, u.Scheme) {
			v.errf(m, path+".url", "roomservice.url", "url must be an http(s):// or ws(s):// URL, not %q", rs.URL)
		}
	}
	if rs.APISecret != "" && rs.APISecretFile != "" {
		v.errf(m, path+".apiSecretFile", "roomservice.secretBoth", "apiSecret and apiSecretFile are both set; keep one")
	}
	v.readable(m, path+".apiSecretFile", "secret.file", rs.APISecretFile)
	v.port(m, path+".sipPort", "roomservice.sipPort", rs.SIPPort, false)
	switch rs.SIPTransport {
	case "udp", "tcp":
	case "tls":
		v.errf(m, path+".sipTransport", "roomservice.sipTransport", "\"tls\" is refused (SIP-TLS listeners are not wired to the SIP stack)")
	default:
		v.errf(m, path+".sipTransport", "roomservice.sipTransport", "sipTransport must be udp or tcp, not %q", rs.SIPTransport)
	}
	if rs.TransportID != "" {
		if l, ok := v.listeners[rs.TransportID]; !ok {
			v.errf(m, path+".transportId", "roomservice.transportId", "no listener has id %q%s", rs.TransportID, suggestFrom(rs.TransportID, v.listenerIDs(), "listeners"))
		} else if l.Transport != rs.SIPTransport && (rs.SIPTransport == "udp" || rs.SIPTransport == "tcp") {
			v.errf(m, path+".transportId", "roomservice.transportId", "listener %q is %s but sipTransport is %s", rs.TransportID, l.Transport, rs.SIPTransport)
		}
	}
	v.prefixes(m, path+".matchIps", "roomservice.matchIps", rs.MatchIPs)
}

func (v *validator) trunk(t *Trunk) {
	m := &t.Meta
	if t.Host == "" {
		v.errf(m, "host", "trunk.host", "host is required")
	}
	if t.Tenant != "" {
		if _, ok := v.tenants[t.Tenant]; !ok {
			v.errf(m, "tenant", "trunk.tenant", "unknown tenant %q%s", t.Tenant, suggestFrom(t.Tenant, v.tenantNames(), "tenants"))
		}
	}
	v.port(m, "port", "trunk.port", t.Port, false)
	if t.Transport != "udp" && t.Transport != "tcp" {
		v.errf(m, "transport", "trunk.transport", "transport must be udp or tcp, not %q", t.Transport)
	}
	if t.TransportID != "" {
		if l, ok := v.listeners[t.TransportID]; !ok {
			v.errf(m, "transportId", "trunk.transportId", "no listener has id %q%s", t.TransportID, suggestFrom(t.TransportID, v.listenerIDs(), "listeners"))
		} else if l.Transport != t.Transport && (t.Transport == "udp" || t.Transport == "tcp") {
			v.errf(m, "transportId", "trunk.transportId", "listener %q is %s but the trunk's transport is %s", t.TransportID, l.Transport, t.Transport)
		}
	}
	if t.Registration.Enabled && (t.Auth.Username == "" || t.Auth.Password == "") {
		v.errf(m, "registration.enabled", "trunk.registrationAuth", "registration needs auth.username and auth.password")
	}
	if t.Registration.Expiry <= 0 {
		v.errf(m, "registration.expiry", "trunk.expiry", "expiry must be positive")
	}
	v.prefixes(m, "inbound.matchIps", "trunk.matchIps", t.Inbound.MatchIPs)
}

func (v *validator) tenant(t *Tenant) {
	m := &t.Meta
	if t.Domain == "" {
		v.errf(m, "domain", "tenant.domain", "domain (the tenant's SIP domain) is required")
	} else if !validDomain(t.Domain) {
		v.errf(m, "domain", "tenant.domain", "%q is not a host name or IP address", t.Domain)
	}
	v.timezone(m, "timezone", t.Timezone)
	if t.AllowInterTenant && !v.cfg.System.AllowInterTenant {
		v.warnf(m, "allowInterTenant", "inert.interTenant", "allowInterTenant has no effect while System.allowInterTenant is false")
	}
	if t.Recording != nil {
		v.recording(m, "recording", t.Recording, false)
	}
	v.roomService(m, t.RoomService, t.LiveKit)
	if t.Storage != nil {
		v.warnf(m, "storage", "inert.tenantStorage", "a tenant's storage block is ignored: recordings use the System bucket, separated by {tenant}")
	}
	if t.SMTP != nil {
		// Only the tenant's own fields are checked here: what it inherits is reported
		// once, on System. Whether from is required depends on the merged block.
		own := *t.SMTP
		own.Host = ""
		v.smtp(m, "smtp", &own)
		if eff := v.cfg.SMTPFor(t); t.Has("smtp.host") && eff.From == "" {
			v.errf(m, "smtp.host", "smtp.fromRequired", "host is set, so from is required")
		}
	}
	v.moh(m, "moh", t.MOH)
	if t.Limits != nil {
		v.limits(m, "limits", t.Limits)
	}
	groups := map[string]bool{}
	for i, g := range t.RingGroups {
		p := fmt.Sprintf("ringGroups[%d]", i)
		if g.Name == "" {
			v.errf(m, p, "ringGroup.name", "a ring group needs a name")
		} else if groups[g.Name] {
			v.errf(m, p+".name", "ringGroup.name", "ring group %q is defined twice", g.Name)
		}
		groups[g.Name] = true
		if g.Strategy != StrategySimultaneous && g.Strategy != StrategySequential {
			v.errf(m, p+".strategy", "ringGroup.strategy", "strategy must be simultaneous or sequential, not %q", g.Strategy)
		}
		if g.RingTimeout <= 0 {
			v.errf(m, p+".ringTimeout", "ringGroup.ringTimeout", "ringTimeout must be positive")
		}
		if len(g.Extensions) == 0 {
			v.errf(m, p+".extensions", "ringGroup.extensions", "a ring group needs at least one extension")
		}
		for j, e := range g.Extensions {
			if _, ok := v.extensions[t.Name][e]; !ok {
				v.errf(m, fmt.Sprintf("%s.extensions[%d]", p, j), "ringGroup.extensions", "no account of tenant %s has extension %q", t.Name, e)
			}
		}
	}
	if len(t.Mailboxes) > 0 && !v.cfg.System.Voicemail.Enabled {
		v.warnf(m, "mailboxes", "inert.mailboxes", "voicemail.enabled is false: calls never reach these mailboxes (the API still lists their messages)")
	}
	boxes := map[string]bool{}
	for i, b := range t.Mailboxes {
		p := fmt.Sprintf("mailboxes[%d]", i)
		if b.Extension == "" {
			v.errf(m, p, "mailbox.extension", "a mailbox needs an extension")
		} else {
			if boxes[b.Extension] {
				v.errf(m, p+".extension", "mailbox.extension", "extension %q has two mailboxes", b.Extension)
			} else if _, ok := v.extensions[t.Name][b.Extension]; !ok {
				v.errf(m, p+".extension", "mailbox.extension", "no account of tenant %s has extension %q", t.Name, b.Extension)
			}
			boxes[b.Extension] = true
		}
		if b.PIN != "" && strings.Trim(b.PIN.Reveal(), "0123456789") != "" {
			v.errf(m, p+".pin", "mailbox.pin", "a PIN is digits only")
		}
		if b.Email != "" {
			if _, err := mail.ParseAddress(b.Email); err != nil {
				v.errf(m, p+".email", "mailbox.email", "%q is not an email address", b.Email)
			}
		}
		v.nonNegative(m, p+".maxMessage", "voicemail.negative", b.MaxMessage)
		if b.MaxMessages < 0 {
			v.errf(m, p+".maxMessages", "mailbox.maxMessages", "maxMessages is negative (%d)", b.MaxMessages)
		}
	}
	codes := []struct{ path, code string }{
		{"featureCodes.voicemail", t.FeatureCodes.Voicemail},
		{"featureCodes.voicemailOther", t.FeatureCodes.VoicemailOther},
	}
	for _, c := range codes {
		if strings.Trim(c.code, "0123456789*#") != "" || c.code == "" {
			v.errf(m, c.path, "tenant.featureCode", "a feature code uses only digits, * and #, not %q", c.code)
		}
	}
	if t.FeatureCodes.Voicemail == t.FeatureCodes.VoicemailOther {
		v.errf(m, "featureCodes.voicemailOther", "tenant.featureCode", "voicemail and voicemailOther are both %q", t.FeatureCodes.Voicemail)
	}
}

func validDomain(d string) bool {
	if net.ParseIP(d) != nil {
		return true
	}
	if len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func (v *validator) account(a *Account) {
	m := &a.Meta
	if a.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", a.Tenant)
	}
	if a.Password == "" {
		v.errf(m, "password", "account.password", "password is required")
	}
	if a.Extension == "" {
		v.errf(m, "extension", "account.extension", "extension is required")
	} else if strings.ContainsAny(a.Extension, "@:;, \t") {
		v.errf(m, "extension", "account.extension", "extension %q may not contain '@', ':', ';', ',' or spaces", a.Extension)
	}
	if a.MaxContacts < 1 || a.MaxContacts > 100 {
		v.errf(m, "maxContacts", "account.maxContacts", "maxContacts must be between 1 and 100, not %d", a.MaxContacts)
	}
	if a.RingTimeout <= 0 {
		v.errf(m, "ringTimeout", "account.ringTimeout", "ringTimeout must be positive")
	}
}

var destinationTypes = []string{DestExtension, DestRingGroup, DestQueue, DestIVR, DestVoicemail, DestExternal, DestHangup}

// destination checks a destination's type and target within tenant.
func (v *validator) destination(m *Meta, path, tenant string, d *Destination, rule string) {
	if !contains(destinationTypes, d.Type) {
		if d.Type == "" {
			v.errf(m, path, "route.destinationType", "destination.type is required (%s)", strings.Join(destinationTypes, ", "))
		} else {
			v.errf(m, path+".type", "route.destinationType", "unknown destination type %q%s", d.Type, suggest(d.Type, destinationTypes))
		}
		return
	}
	if d.Type == DestHangup {
		return
	}
	if d.Target == "" {
		v.errf(m, path, rule, "destination.target is required for type %s", d.Type)
		return
	}
	if _, ok := v.tenants[tenant]; !ok {
		return // the unknown tenant is reported already
	}
	switch d.Type {
	case DestExtension:
		if _, ok := v.extensions[tenant][d.Target]; !ok {
			v.errf(m, path+".target", rule, "no account of tenant %s has extension %q", tenant, d.Target)
		}
	case DestRingGroup:
		if !v.ringGroups[tenant][d.Target] {
			v.errf(m, path+".target", rule, "tenant %s has no ring group %q", tenant, d.Target)
		}
	case DestVoicemail:
		if !v.mailboxes[tenant][d.Target] {
			v.errf(m, path+".target", rule, "tenant %s has no mailbox for extension %q", tenant, d.Target)
		}
	}
}

func (v *validator) inboundRoute(r *InboundRoute) {
	m := &r.Meta
	if r.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", r.Tenant)
	}
	if r.DID == "" {
		v.errf(m, "did", "route.did", "did is required")
	}
	v.destination(m, "destination", r.Tenant, &r.Destination, "route.target")
	if r.Destination.Type == DestQueue || r.Destination.Type == DestIVR {
		v.warnf(m, "destination.type", "inert.destination", "destination type %s validates but calls to it are answered 404", r.Destination.Type)
	}
}

func (v *validator) override(o *InboundOverride) {
	m := &o.Meta
	if o.DID == "" {
		v.errf(m, "did", "route.did", "did is required (a number, or * as the global catch-all)")
	}
	if o.Tenant == "" {
		v.errf(m, "tenant", "override.tenant", "tenant (the tenant that handles the call) is required")
	} else if _, ok := v.tenants[o.Tenant]; !ok {
		v.errf(m, "tenant", "override.tenant", "unknown tenant %q%s", o.Tenant, suggestFrom(o.Tenant, v.tenantNames(), "tenants"))
	}
	if o.Destination == nil {
		return
	}
	v.destination(m, "destination", o.Tenant, o.Destination, "override.target")
	if t := o.Destination.Type; contains(destinationTypes, t) && t != DestExtension && t != DestRingGroup {
		v.warnf(m, "destination.type", "inert.overrideDestination", "an override delivers only extension and ring_group; calls to a %s destination are logged as an invalid destination type and answered 404", t)
	}
}

func (v *validator) outboundRoute(r *OutboundRoute) {
	m := &r.Meta
	if r.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", r.Tenant)
	}
	if r.Pattern == "" {
		v.errf(m, "pattern", "outbound.pattern", "pattern is required")
	} else if _, err := regexp.Compile(r.Pattern); err != nil {
		v.errf(m, "pattern", "outbound.pattern", "pattern does not compile: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	if r.Strip < 0 {
		v.errf(m, "strip", "outbound.strip", "strip must not be negative")
	}
	if r.Trunk == "" {
		v.errf(m, "trunk", "outbound.trunk", "trunk is required")
	} else if _, ok := v.trunks[r.Trunk]; !ok {
		v.errf(m, "trunk", "outbound.trunk", "unknown trunk %q%s", r.Trunk, suggestFrom(r.Trunk, v.trunkNames(), "trunks"))
	}
}

// WebhookEvents are the event kinds a Webhook may subscribe to; call.ended
// (the finished call record) is beyond the specification.
var WebhookEvents = []string{"mobile.ringing", "mobile.ended", "call.ended"}

func (v *validator) webhook(w *Webhook) {
	m := &w.Meta
	if w.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", w.Tenant)
	}
	if w.URL == "" {
		v.errf(m, "url", "webhook.url", "url is required")
	} else if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errf(m, "url", "webhook.url", "url must be an http:// or https:// URL, not %q", w.URL)
	}
	if len(w.Events) == 0 {
		v.errf(m, "events", "webhook.event", "events is required (%s)", strings.Join(WebhookEvents, ", "))
	}
	for i, e := range w.Events {
		if !contains(WebhookEvents, e) {
			v.errf(m, fmt.Sprintf("events[%d]", i), "webhook.event", "unknown event %q%s", e, suggest(e, WebhookEvents))
		}
	}
	switch {
	case w.Secret != "" && w.SecretFile != "":
		v.errf(m, "secretFile", "webhook.secret", "secret and secretFile are both set; keep one")
	case w.Secret == "" && w.SecretFile == "":
		v.errf(m, "", "webhook.secret", "a webhook needs secret or secretFile: deliveries are signed")
	}
	v.readable(m, "secretFile", "secret.file", w.SecretFile)
	v.nonNegative(m, "timeout", "webhooks.negative", w.Timeout)
}

// crossDocument runs the checks that compare documents: domains and DIDs claimed
// twice across tenants.
// mohClass checks that a named music-on-hold class exists in the tenant's
// moh block or the System's.
func (v *validator) mohClass(m *Meta, tenant, class string) {
	if class == "" {
		return
	}
	if s := v.cfg.System.MOH; s != nil {
		if _, ok := s.Classes[class]; ok || class == "default" {
			return
		}
	}
	if t := v.tenants[tenant]; t != nil && t.MOH != nil {
		if _, ok := t.MOH.Classes[class]; ok || class == "default" {
			return
		}
	}
	v.errf(m, "mohClass", "moh.class", "no music-on-hold class %q in Tenant/%s or the System", class, tenant)
}

func (v *validator) crossDocument() {
	for _, a := range v.cfg.Accounts {
		v.mohClass(&a.Meta, a.Tenant, a.MOHClass)
	}
	for _, r := range v.cfg.InboundRoutes {
		v.mohClass(&r.Meta, r.Tenant, r.MOHClass)
	}
	domains := map[string]*Tenant{}
	for _, t := range v.cfg.Tenants {
		if t.Domain == "" {
			continue
		}
		key := strings.ToLower(t.Domain)
		if first, ok := domains[key]; ok {
			v.errf(&t.Meta, "domain", "tenant.domainDuplicate", "domain %q is already claimed by Tenant/%s (%s:%d)", t.Domain, first.Name, first.File, first.LineOf("domain"))
			continue
		}
		domains[key] = t
	}
	owners := map[string]*InboundRoute{}
	prio := map[string]*InboundRoute{}
	for _, r := range v.cfg.InboundRoutes {
		if r.DID == "" {
			continue
		}
		if first, ok := owners[r.DID]; ok && first.Tenant != r.Tenant {
			v.errf(&r.Meta, "did", "did.duplicate", "DID %q is already claimed by tenant %s (InboundRoute/%s, %s:%d)", r.DID, first.Tenant, first.displayName(), first.File, first.LineOf("did"))
			continue
		}
		if _, ok := owners[r.DID]; !ok {
			owners[r.DID] = r
		}
		pk := fmt.Sprintf("%s\x00%s\x00%d", r.Tenant, r.DID, r.Priority)
		if first, ok := prio[pk]; ok {
			v.errf(&r.Meta, "priority", "did.duplicate", "DID %q already has a route with priority %d (InboundRoute/%s, %s:%d)", r.DID, r.Priority, first.displayName(), first.File, first.LineOf("did"))
			continue
		}
		prio[pk] = r
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
