package upload

import (
	"strings"
	"time"
)

// Kinds substituted for {kind}.
const (
	KindAudio = "audio"
	KindMeta  = "meta"
)

// KeyVars are the values of a key template's tokens for one recording.
type KeyVars struct {
	Tenant string
	CallID string // the recording's (and call record's) id
	Ext    string
	Start  time.Time // the call's start, in the zone the date tokens use
}

// Sanitize makes v safe as a key segment: anything outside
// [A-Za-z0-9._+-] becomes _, and an empty value, "." or ".." is "_", so no
// substituted value can add a path element or climb out of its tenant.
func Sanitize(v string) string {
	if v == "" || v == "." || v == ".." {
		return "_"
	}
	b := []byte(v)
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '+' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Key expands template for kind: {tenant} {callid} {ext} {kind} {yyyy}
// {mm} (month) {dd} {HH} {MM} (minute), case-sensitive; the validator has
// refused any other token. Substituted values are sanitised.
func Key(template, kind string, v KeyVars) string {
	t := v.Start
	r := strings.NewReplacer(
		"{tenant}", Sanitize(v.Tenant),
		"{callid}", Sanitize(v.CallID),
		"{ext}", Sanitize(v.Ext),
		"{kind}", kind,
		"{yyyy}", t.Format("2006"),
		"{mm}", t.Format("01"),
		"{dd}", t.Format("02"),
		"{HH}", t.Format("15"),
		"{MM}", t.Format("04"),
	)
	return r.Replace(template)
}

// KeysFor are the object keys of one recording's audio and sidecar. Without
// {kind} in the template the sidecar's key is the audio key with a final
// .wav replaced by .json (or .json appended).
func KeysFor(template string, v KeyVars) Keys {
	audio := Key(template, KindAudio, v)
	if strings.Contains(template, "{kind}") {
		return Keys{Audio: audio, Meta: Key(template, KindMeta, v)}
	}
	meta, ok := strings.CutSuffix(audio, ".wav")
	if !ok {
		meta = audio
	}
	return Keys{Audio: audio, Meta: meta + ".json"}
}
