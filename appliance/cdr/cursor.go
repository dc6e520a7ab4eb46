package cdr

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

const (
	cursorVersion = 1
	cursorMACLen  = 10
)

// Cursor encodes the opaque position of a listing that runs newest first by
// start time and then id (the call log's, the recordings'): a page's
// NextCursor. It is bound to the query it was made for by a fingerprint of
// the query's filters and signed with Key, so it can be neither forged nor
// edited nor used with another query. The zero Key signs too, but a store
// should use a random one.
type Cursor struct{ Key []byte }

// Encode returns the cursor after the position (ms, id):
// base64url(version(1) | start ms(8) | fingerprint(8) | id | mac(10)).
func (c Cursor) Encode(ms int64, id ID, fp [8]byte) string {
	b := make([]byte, 0, 1+8+8+len(id)+cursorMACLen)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(ms))
	b = append(b, fp[:]...)
	b = append(b, id...)
	b = append(b, c.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c Cursor) mac(b []byte) []byte {
	m := hmac.New(sha256.New, c.Key)
	m.Write(b)
	return m.Sum(nil)[:cursorMACLen]
}

// Decode checks a cursor and returns its position. Any damage, any edit,
// and a cursor made for another query give ErrBadCursor.
func (c Cursor) Decode(s string, fp [8]byte) (ms int64, id ID, err error) {
	if len(s) > 256 {
		return 0, "", ErrBadCursor
	}
	for i := 0; i < len(s); i++ { // the decoder skips newlines; a cursor has none
		ch := s[i]
		if !(ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return 0, "", ErrBadCursor
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) < 1+8+8+1+cursorMACLen || b[0] != cursorVersion {
		return 0, "", ErrBadCursor
	}
	body, tag := b[:len(b)-cursorMACLen], b[len(b)-cursorMACLen:]
	if !hmac.Equal(tag, c.mac(body)) {
		return 0, "", ErrBadCursor
	}
	if string(body[9:17]) != string(fp[:]) {
		return 0, "", fmt.Errorf("%w: made for another query", ErrBadCursor)
	}
	id = ID(body[17:])
	if id.Validate() != nil {
		return 0, "", ErrBadCursor
	}
	return int64(binary.BigEndian.Uint64(body[1:9])), id, nil
}
