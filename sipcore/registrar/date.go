package registrar

import (
	"net/http"
	"sync/atomic"
	"time"
)

// dateCache keeps the Date header value of the current second, so a
// registrar answering thousands of REGISTERs a second formats it once a
// second instead of once a 200.
type dateCache struct {
	p atomic.Pointer[dateValue]
}

type dateValue struct {
	unix int64
	text string
}

// format returns t as an HTTP-date (RFC 3261 20.17), in UTC.
func (c *dateCache) format(t time.Time) string {
	sec := t.Unix()
	if v := c.p.Load(); v != nil && v.unix == sec {
		return v.text
	}
	v := &dateValue{unix: sec, text: t.UTC().Format(http.TimeFormat)}
	c.p.Store(v)
	return v.text
}
