package mobile

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"pbx/appliance/cdr"
	amobile "pbx/appliance/mobile"
	"pbx/web/api"
)

// cdrParams are the /v1/cdr filters that make sense for one extension.
var cdrParams = []string{"from", "to", "direction", "number", "answered", "cursor", "limit"}

// accountBody is the account part of login, refresh and me.
type accountBody struct {
	Tenant      string `json:"tenant"`
	Username    string `json:"username"`
	Extension   string `json:"extension"`
	DisplayName string `json:"display_name"`
}

type roomServiceBody struct {
	URL string `json:"url"`
}

// sessionBody answers login and refresh.
type sessionBody struct {
	Token       string           `json:"token"`
	ExpiresAt   time.Time        `json:"expires_at"`
	Device      amobile.Device   `json:"device"`
	Account     accountBody      `json:"account"`
	RoomService *roomServiceBody `json:"roomservice"`
}

type meBody struct {
	Device    amobile.Device `json:"device"`
	Account   accountBody    `json:"account"`
	ExpiresAt time.Time      `json:"expires_at"`
}

func (h *Handler) account(se amobile.Session) accountBody {
	b := accountBody{Tenant: se.Device.Tenant, Username: se.Device.Account, Extension: se.Device.Extension}
	if a, ok := h.o.Sessions.AccountOf(se); ok {
		b.DisplayName = a.DisplayName
	}
	return b
}

func (h *Handler) issued(w http.ResponseWriter, is amobile.Issued) error {
	body := sessionBody{Token: is.Token, ExpiresAt: is.Session.ExpiresAt.UTC(), Device: is.Session.Device,
		Account: h.account(is.Session)}
	if u := h.o.RoomServiceURL(is.Session.Device.Tenant); u != "" {
		body.RoomService = &roomServiceBody{URL: u}
	}
	return api.WriteJSON(w, http.StatusOK, body)
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request, _ *call) error {
	var l amobile.Login
	if err := decode(w, r, &l); err != nil {
		return err
	}
	is, err := h.o.Sessions.Login(srcAddr(r), l)
	if err != nil {
		return err
	}
	return h.issued(w, is)
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := noBody(r); err != nil {
		return err
	}
	is, err := h.o.Sessions.Refresh(c.token)
	if err != nil {
		return err
	}
	return h.issued(w, is)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := noBody(r); err != nil {
		return err
	}
	if err := h.o.Sessions.Logout(c.token); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) me(w http.ResponseWriter, r *http.Request, c *call) error {
	return api.WriteJSON(w, http.StatusOK, meBody{Device: c.session.Device, Account: h.account(c.session),
		ExpiresAt: c.session.ExpiresAt.UTC()})
}

func (h *Handler) setDevice(w http.ResponseWriter, r *http.Request, c *call) error {
	var body struct {
		Push json.RawMessage `json:"push"`
	}
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if body.Push == nil {
		return api.Invalid("push: required (an object)")
	}
	se, err := h.o.Sessions.SetPush(c.token, body.Push)
	if err != nil {
		return err
	}
	return api.WriteJSON(w, http.StatusOK, se.Device)
}

func (h *Handler) cdr(w http.ResponseWriter, r *http.Request, c *call) error {
	if h.o.CallLog == nil {
		return api.NotRunning("call log")
	}
	q, err := api.CDRQuery(c.query, nil)
	if err != nil {
		return err
	}
	d := c.session.Device
	// The extension's calls: to it, and those it placed.
	q.Tenant, q.Tenants, q.Party = d.Tenant, []string{d.Tenant}, d.Extension
	page, err := h.o.CallLog.List(r.Context(), q)
	if err != nil {
		return err
	}
	recs := make([]cdr.Entry, 0, len(page.Records))
	for _, e := range page.Records { // nothing of another tenant or extension leaves
		if e.Tenant == d.Tenant && cdr.IsParty(&e, d.Extension) {
			recs = append(recs, e)
		}
	}
	page.Records = recs
	return api.WriteJSON(w, http.StatusOK, page)
}

func (h *Handler) voicemailID(r *http.Request) (string, error) {
	if h.o.Voicemail == nil {
		return "", api.NotRunning("voicemail")
	}
	id := chi.URLParam(r, "id")
	if id == "" || len(id) > 128 {
		return "", api.NotFound("no such message")
	}
	return id, nil
}

func (h *Handler) voicemailList(w http.ResponseWriter, r *http.Request, c *call) error {
	if h.o.Voicemail == nil {
		return api.NotRunning("voicemail")
	}
	v, err := h.o.Voicemail.List(r.Context(), c.session.Device.Tenant, c.session.Device.Extension)
	if err != nil {
		return err
	}
	return api.WriteJSON(w, http.StatusOK, v)
}

func (h *Handler) voicemailGet(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := h.voicemailID(r)
	if err != nil {
		return err
	}
	v, err := h.o.Voicemail.Get(r.Context(), c.session.Device.Tenant, c.session.Device.Extension, id)
	if err != nil {
		return err
	}
	return api.WriteJSON(w, http.StatusOK, v)
}

func (h *Handler) voicemailAudio(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := h.voicemailID(r)
	if err != nil {
		return err
	}
	f, mod, err := h.o.Voicemail.Audio(r.Context(), c.session.Device.Tenant, c.session.Device.Extension, id)
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "audio/wav")
	http.ServeContent(w, r, "", mod, f)
	return nil
}

func (h *Handler) voicemailDelete(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := h.voicemailID(r)
	if err != nil {
		return err
	}
	if err := h.o.Voicemail.Delete(r.Context(), c.session.Device.Tenant, c.session.Device.Extension, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) placeCall(w http.ResponseWriter, r *http.Request, c *call) error {
	if h.o.Calls == nil {
		return api.NotRunning("room service")
	}
	var body struct {
		To string `json:"to"`
	}
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if body.To == "" || len(body.To) > 64 {
		return api.Invalid("to: required, at most 64 characters")
	}
	pc, err := h.o.Calls.Place(r.Context(), c.session, body.To)
	if err != nil {
		return err
	}
	pc.ExpiresAt = pc.ExpiresAt.UTC()
	return api.WriteJSON(w, http.StatusAccepted, struct {
		Call amobile.Call `json:"call"`
	}{pc})
}

func (h *Handler) roomToken(w http.ResponseWriter, r *http.Request, c *call) error {
	if h.o.Calls == nil {
		return api.NotRunning("room service")
	}
	var body struct {
		Room string `json:"room"`
	}
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if body.Room == "" || len(body.Room) > 128 {
		return api.Invalid("room: required, at most 128 characters")
	}
	rt, err := h.o.Calls.RoomToken(r.Context(), c.session, body.Room)
	if err != nil {
		return err
	}
	rt.ExpiresAt = rt.ExpiresAt.UTC()
	return api.WriteJSON(w, http.StatusOK, rt)
}
