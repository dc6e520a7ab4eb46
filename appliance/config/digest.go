package config

import "fmt"

// digestAlgorithmNames are the values sip.digestAlgorithms takes.
var digestAlgorithmNames = []string{"md5", "sha-256"}

// digestAlgorithms checks sip.digestAlgorithms: at least one, each md5 or
// sha-256, none twice. The order is the order of the challenge headers.
func (v *validator) digestAlgorithms(m *Meta) {
	algs := v.cfg.System.SIP.DigestAlgorithms
	if len(algs) == 0 {
		v.errf(m, "sip.digestAlgorithms", "sip.digestAlgorithm", "at least one digest algorithm is required (md5, sha-256)")
	}
	seen := map[string]bool{}
	for i, a := range algs {
		p := fmt.Sprintf("sip.digestAlgorithms[%d]", i)
		switch {
		case a != "md5" && a != "sha-256":
			v.errf(m, p, "sip.digestAlgorithm", "unsupported digest algorithm %q: use md5 or sha-256%s", a, suggest(a, digestAlgorithmNames))
		case seen[a]:
			v.errf(m, p, "sip.digestAlgorithm", "digest algorithm %q is listed twice", a)
		}
		seen[a] = true
	}
}
