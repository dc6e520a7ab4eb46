package config

import (
	"net/url"
	"regexp"
	"strings"
)

// dataDir checks that dataDir is set when something writes under it: call
// records, recordings, voicemail, a tenant's recording or mailboxes.
func (v *validator) dataDir(m *Meta, s *System) {
	if s.DataDir != "" {
		return
	}
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

// storage checks the storage block and that recording.storage: s3 has one.
func (v *validator) storage(m *Meta, s *System) {
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
}

var recordingModes = []string{"none", "inbound", "outbound", "internal", "all"}

// recording checks a recording block, the System's or (system false) a
// tenant's, which takes only enabled and mode.
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

// s3 checks storage.s3: bucket, region or endpoint, key prefix, encryption,
// credentials and timeouts.
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
