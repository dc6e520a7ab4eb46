package config

import (
	"fmt"
	"net"
)

// sip checks the sip block: the default bind address, the listeners, sip.tcp,
// the digest algorithms and sip.tls.
func (v *validator) sip(m *Meta, s *SIP) {
	v.port(m, "sip.bindPort", "sip.port", s.BindPort, false)
	if s.BindHost != "" && net.ParseIP(s.BindHost) == nil {
		v.errf(m, "sip.bindHost", "sip.bindHost", "%q is not an IP address", s.BindHost)
	}
	if len(s.Transports) == 0 && m.Has("sip.transports") {
		v.errf(m, "sip.transports", "sip.transport", "at least one listener is required")
	}
	v.sipListeners(m, s)
	v.sipTCP(m, &s.TCP)
	v.digestAlgorithms(m)
	if s.TLS != nil {
		v.tls(m, "sip.tls", s.TLS)
		v.warnf(m, "sip.tls", "inert.sipTLS", "sip.tls is accepted but not applied to SIP (only api.tls is used)")
	}
}

// sipListeners checks each entry of sip.transports: its transport and srtp,
// the certificate they need, its bind address, a unique id, and no socket
// bound twice.
func (v *validator) sipListeners(m *Meta, s *SIP) {
	hasCert := s.TLS != nil && (s.TLS.CertFile != "" || len(s.TLS.Certificates) > 0)
	ids := map[string]string{}
	type sock struct {
		proto, host string
		port        int
		path        string
	}
	var socks []sock
	for i, l := range s.Transports {
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
}

// isWildcard reports whether host is an unspecified address (0.0.0.0 or ::).
func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
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

// tls checks a TLS block, sip.tls or api.tls: certificate and key pairs that
// can be read, a minimum version, a positive reload interval.
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
