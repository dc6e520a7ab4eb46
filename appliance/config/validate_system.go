package config

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"sort"
	"strings"
	"text/template"
	"time"
)

// system checks the System document one section after another, in the order
// its problems are reported.
func (v *validator) system() {
	s := &v.cfg.System
	m := &s.Meta

	v.sip(m, &s.SIP)
	v.media(m, &s.Media)
	v.moh(m, "moh", s.MOH)
	v.timezone(m, "timezone", s.Timezone)
	v.defaultTrunk(m, s.DefaultTrunk)
	v.dataDir(m, s)
	v.nonNegative(m, "cdr.retention", "cdr.retention", s.CDR.Retention)
	v.recording(m, "recording", &s.Recording, true)
	v.storage(m, s)
	v.voicemail(m, &s.Voicemail)
	if s.SMTP != nil {
		v.smtp(m, "smtp", s.SMTP)
	}
	if s.TTS != nil {
		v.tts(m, s.TTS)
	}
	v.webhookDefaults(m, &s.Webhooks)
	if s.API.Enabled {
		v.api(m, &s.API)
	}
	v.security(m, &s.Security)
	v.roomService(m, s.RoomService, s.LiveKit)
}

// media checks the media block: codecs, the RTP port range, the SAVP profile,
// the timeouts and the external address.
func (v *validator) media(m *Meta, md *Media) {
	if len(md.Codecs) == 0 {
		v.errf(m, "media.codecs", "media.codec", "at least one codec is required (alaw, ulaw)")
	}
	codecSeen := map[string]bool{}
	for i, c := range md.Codecs {
		p := fmt.Sprintf("media.codecs[%d]", i)
		if c != "alaw" && c != "ulaw" {
			v.errf(m, p, "media.codec", "unsupported codec %q: only alaw and ulaw (no transcoding)", c)
		} else if codecSeen[c] {
			v.errf(m, p, "media.codec", "codec %q is listed twice", c)
		}
		codecSeen[c] = true
	}
	minSet, maxSet := m.Has("media.rtpPortMin"), m.Has("media.rtpPortMax")
	switch {
	case minSet != maxSet:
		p, missing := "media.rtpPortMin", "rtpPortMax"
		if maxSet {
			p, missing = "media.rtpPortMax", "rtpPortMin"
		}
		v.errf(m, p, "media.rtpPortPair", "rtpPortMin and rtpPortMax must be set together (%s is missing)", missing)
	case minSet:
		v.port(m, "media.rtpPortMin", "media.rtpPortRange", md.RTPPortMin, false)
		v.port(m, "media.rtpPortMax", "media.rtpPortRange", md.RTPPortMax, false)
		if md.RTPPortMax <= md.RTPPortMin {
			v.errf(m, "media.rtpPortMax", "media.rtpPortOrder", "rtpPortMax (%d) must be greater than rtpPortMin (%d)", md.RTPPortMax, md.RTPPortMin)
		}
	}
	switch md.SAVPProfile {
	case "":
	case "always", "mirror":
		v.warnf(m, "media.savpProfile", "inert.savpProfile", "savpProfile is validated but never applied: every call is plain RTP")
	default:
		v.errf(m, "media.savpProfile", "media.savpProfile", "savpProfile must be always or mirror, not %q", md.SAVPProfile)
	}
	v.nonNegative(m, "media.timeout", "media.timeout", md.Timeout)
	if q := md.PortQuarantine; q < 0 || q > Duration(time.Minute) {
		v.errf(m, "media.portQuarantine", "media.portQuarantine", "must be between 0s and 1m (%s): a port resting longer only shrinks the range", q)
	}
	switch md.RelayPriority {
	case "normal", "high", "realtime":
	default:
		v.errf(m, "media.relayPriority", "media.relayPriority", "relayPriority must be normal, high or realtime, not %q", md.RelayPriority)
	}
	if md.ExternalIP != "" && net.ParseIP(md.ExternalIP) == nil {
		v.errf(m, "media.externalIp", "media.externalIp", "%q is not an IP address", md.ExternalIP)
	}
}

// defaultTrunk checks that System.defaultTrunk, when set, names a Trunk.
func (v *validator) defaultTrunk(m *Meta, name string) {
	if name != "" {
		if _, ok := v.trunks[name]; !ok {
			v.errf(m, "defaultTrunk", "system.defaultTrunk", "unknown trunk %q%s", name, suggestFrom(name, v.trunkNames(), "trunks"))
		}
	}
}

// voicemail checks the System voicemail block: no negative duration, the
// shortest message within the longest, a readable prompts directory.
func (v *validator) voicemail(m *Meta, vm *Voicemail) {
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
}

// tts checks the tts block: a known provider and a readable key file.
func (v *validator) tts(m *Meta, t *TTS) {
	if t.Provider != "" && t.Provider != "ttsprovider" {
		v.errf(m, "tts.provider", "tts.provider", "unknown provider %q (only ttsprovider is accepted)", t.Provider)
	}
	v.readable(m, "tts.apiKeyFile", "secret.file", t.APIKeyFile)
}

// webhookDefaults checks the System webhooks block, the delivery defaults
// every Webhook document inherits.
func (v *validator) webhookDefaults(m *Meta, w *Webhooks) {
	if w.Concurrency > 64 || w.Concurrency < 0 {
		v.errf(m, "webhooks.concurrency", "webhooks.concurrency", "concurrency must be between 0 and 64, not %d", w.Concurrency)
	}
	v.nonNegative(m, "webhooks.timeout", "webhooks.negative", w.Timeout)
	v.nonNegative(m, "webhooks.maxAttemptAge", "webhooks.negative", w.MaxAttemptAge)
}

// moh checks a music-on-hold block, the System's or a tenant's: every file
// readable.
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

// smtp checks an smtp block, the System's or a tenant's own fields.
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

// roomService checks a roomservice block (or its deprecated spelling
// livekit), the System's or a tenant's.
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
