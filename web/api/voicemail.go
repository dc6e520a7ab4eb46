package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"pbx/appliance/voicemail"
)

// VoicemailSource lists, reads, opens and deletes voicemail messages.
// *voicemail.Store implements it; unknown messages are voicemail.ErrNotFound
// and unsafe names voicemail.ErrInvalid.
type VoicemailSource interface {
	// List returns the messages of tenant (every tenant when empty),
	// newest first.
	List(tenant, extension string) ([]voicemail.Message, error)
	Get(tenant, extension, id string) (*voicemail.Message, error)
	// OpenAudio returns the WAV with its message; the caller closes it.
	OpenAudio(tenant, extension, id string) (*os.File, *voicemail.Message, error)
	Delete(tenant, extension, id string) error
}

type voicemailList struct {
	Messages []voicemail.Message `json:"messages"`
}

func (h *Handler) voicemailList(w http.ResponseWriter, r *http.Request, q Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Voicemail == nil {
		return NotRunning("voicemail")
	}
	tenant, _, err := tenantScope(q, p)
	if err != nil {
		return err
	}
	ms, err := h.b.Voicemail.List(tenant, "")
	if err != nil {
		return Internal(fmt.Errorf("voicemail list: %w", err))
	}
	ext := q.String("extension")
	out := []voicemail.Message{}
	// Every row is checked: nothing of another tenant leaves here.
	for _, m := range ms {
		if p.SeesTenant(m.Tenant) && (ext == "" || m.Extension == ext) {
			out = append(out, m)
		}
	}
	return WriteJSON(w, http.StatusOK, voicemailList{out})
}

// voicemailTarget reads {tenant}, {extension} and {id} and checks that p
// may see them; anything else is the same 404 as an unknown message.
func (h *Handler) voicemailTarget(r *http.Request) (tenant, ext, id string, err error) {
	p, err := caller(r)
	if err != nil {
		return "", "", "", err
	}
	if h.b.Voicemail == nil {
		return "", "", "", NotRunning("voicemail")
	}
	if tenant, err = param(r, "tenant"); err != nil {
		return "", "", "", err
	}
	if ext, err = param(r, "extension"); err != nil {
		return "", "", "", err
	}
	if id, err = param(r, "id"); err != nil {
		return "", "", "", err
	}
	if !p.SeesTenant(tenant) {
		return "", "", "", voicemailNotFound(tenant, ext, id)
	}
	return tenant, ext, id, nil
}

func voicemailNotFound(tenant, ext, id string) *Error {
	return NotFound("no voicemail message %q in %q/%q", clip(id), clip(tenant), clip(ext))
}

// voicemailError maps a store error: unknown or unsafe names are 404,
// anything else 500.
func voicemailError(err error, tenant, ext, id string) error {
	if errors.Is(err, voicemail.ErrNotFound) || errors.Is(err, voicemail.ErrInvalid) {
		e := voicemailNotFound(tenant, ext, id)
		e.Err = err
		return e
	}
	return Internal(fmt.Errorf("voicemail %s/%s/%s: %w", tenant, ext, id, err))
}

func (h *Handler) voicemailGet(w http.ResponseWriter, r *http.Request, _ Query) error {
	tenant, ext, id, err := h.voicemailTarget(r)
	if err != nil {
		return err
	}
	m, err := h.b.Voicemail.Get(tenant, ext, id)
	if err != nil {
		return voicemailError(err, tenant, ext, id)
	}
	return WriteJSON(w, http.StatusOK, m)
}

// voicemailAudio serves the WAV as recording audio is served (Range, 206,
// 416, an ETag from the content's sha256).
func (h *Handler) voicemailAudio(w http.ResponseWriter, r *http.Request, _ Query) error {
	tenant, ext, id, err := h.voicemailTarget(r)
	if err != nil {
		return err
	}
	f, _, err := h.b.Voicemail.OpenAudio(tenant, ext, id)
	if err != nil {
		return voicemailError(err, tenant, ext, id)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Internal(err)
	}
	// A message's audio never changes once stored: hash it per request
	// (a few MB at most) rather than keep a digest beside it.
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return Internal(fmt.Errorf("voicemail audio: %w", err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Internal(err)
	}
	serveAudio(w, r, id+".wav", hex.EncodeToString(sum.Sum(nil)), fi.ModTime(), f)
	return nil
}

func (h *Handler) voicemailDelete(w http.ResponseWriter, r *http.Request, _ Query) error {
	tenant, ext, id, err := h.voicemailTarget(r)
	if err != nil {
		return err
	}
	if err := h.b.Voicemail.Delete(tenant, ext, id); err != nil {
		return voicemailError(err, tenant, ext, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// serveAudio streams a WAV with Range requests (206 and Content-Range, 416
// when unsatisfiable) and, given the content's sha256, an ETag for
// If-None-Match.
func serveAudio(w http.ResponseWriter, r *http.Request, name, sha string, mod time.Time, f io.ReadSeeker) {
	hd := w.Header()
	hd.Set("Content-Type", "audio/wav")
	if sha != "" && !strings.ContainsAny(sha, "\"\r\n") {
		hd.Set("ETag", `"`+sha+`"`)
	}
	http.ServeContent(w, r, name, mod, f)
}
