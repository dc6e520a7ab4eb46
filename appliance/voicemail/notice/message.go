package notice

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// DefaultSubject and DefaultBody are the built-in templates (DESIGN 5.7).
const (
	DefaultSubject = `New voicemail from {{.From}} ({{.Duration}})`
	DefaultBody    = `You have a new voicemail message in mailbox {{.Extension}}.

From:     {{if .FromName}}{{.FromName}} <{{.From}}>{{else}}{{.From}}{{end}}
Received: {{.ReceivedAt.Format "Monday 2 January 2006 15:04 MST"}}
Duration: {{.Duration}}

{{if .Attached}}The recording is attached.{{else}}Dial your voicemail to listen to it.{{end}}
`
)

// Vars are the variables of the subject and body templates.
type Vars struct {
	Tenant, Extension string
	From, FromName    string // the caller
	Duration          Duration
	ReceivedAt        time.Time
	MessageID         string // the voicemail message's id
	Attached          bool   // the recording is attached to this email
}

// Duration prints as minutes and seconds, "1:05".
type Duration time.Duration

func (d Duration) String() string {
	s := int64(time.Duration(d).Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// render executes one template (built-in when text is empty).
func render(name, text, def string, v Vars) (string, error) {
	if text == "" {
		text = def
	}
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("smtp %s template: %w", name, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("smtp %s template: %w", name, err)
	}
	return b.String(), nil
}

// email is a composed message and its envelope.
type email struct {
	from, to string // envelope addresses
	data     []byte
}

// compose builds the MIME message of a job: a text part and, when wav is
// not nil, the recording as an audio/wav attachment in base64.
func compose(j *Job, fromHeader, subject, body string, wav []byte) (*email, error) {
	from, err := mail.ParseAddress(fromHeader)
	if err != nil {
		return nil, fmt.Errorf("smtp from %q: %w", fromHeader, err)
	}
	to, err := mail.ParseAddress(j.Notice.To)
	if err != nil {
		return nil, fmt.Errorf("mailbox email %q: %w", j.Notice.To, err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	hdr := func(k, v string) { fmt.Fprintf(&buf, "%s: %s\r\n", k, v) }
	hdr("From", from.String())
	hdr("To", to.String())
	hdr("Subject", mime.QEncoding.Encode("utf-8", oneLine(subject)))
	hdr("Date", j.CreatedAt.Format(time.RFC1123Z))
	hdr("Message-ID", messageID(j.ID, from.Address))
	hdr("MIME-Version", "1.0")
	hdr("Content-Type", `multipart/mixed; boundary="`+mw.Boundary()+`"`)
	buf.WriteString("\r\n")

	pw, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Type":              {"text/plain; charset=utf-8"},
		"Content-Transfer-Encoding": {"quoted-printable"},
	})
	if err != nil {
		return nil, err
	}
	qp := quotedprintable.NewWriter(pw)
	qp.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n")))
	qp.Close()
	if wav != nil {
		name := attachmentName(j)
		aw, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {mime.FormatMediaType("audio/wav", map[string]string{"name": name})},
			"Content-Disposition":       {mime.FormatMediaType("attachment", map[string]string{"filename": name})},
			"Content-Transfer-Encoding": {"base64"},
		})
		if err != nil {
			return nil, err
		}
		enc := base64.StdEncoding.EncodeToString(wav)
		for len(enc) > 76 {
			aw.Write([]byte(enc[:76] + "\r\n"))
			enc = enc[76:]
		}
		aw.Write([]byte(enc + "\r\n"))
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return &email{from: from.Address, to: to.Address, data: buf.Bytes()}, nil
}

// messageID is the job's stable Message-ID: every copy of a notice,
// including one sent again after a crash, carries the same.
func messageID(jobID, fromAddr string) string {
	domain := "pbx.invalid"
	if i := strings.LastIndexByte(fromAddr, '@'); i >= 0 && i < len(fromAddr)-1 {
		domain = fromAddr[i+1:]
	}
	return "<voicemail-" + jobID + "@" + domain + ">"
}

func attachmentName(j *Job) string {
	base := strings.TrimSuffix(filepath.Base(j.Notice.WAV), ".wav")
	if base == "" || base == "." || base == "/" {
		base = "message"
	}
	return "voicemail-" + j.Notice.Extension + "-" + base + ".wav"
}

// oneLine folds a rendered subject onto one line (no header injection).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
