package sipcore

import (
	"strings"

	"github.com/emiago/sipgo/sip"
)

// phrases are the reason phrases of RFC 3261 section 21 and of the
// extensions that define codes (RFC 3262, 3265/6665, 3329, 3903, 4028,
// 4412, 5079, 5360, 5393, 6086, 8197, 8599, 8688).
var phrases = map[int]string{
	100: "Trying", 180: "Ringing", 181: "Call Is Being Forwarded", 182: "Queued", 183: "Session Progress",
	199: "Early Dialog Terminated",
	200: "OK", 202: "Accepted", 204: "No Notification",
	300: "Multiple Choices", 301: "Moved Permanently", 302: "Moved Temporarily", 305: "Use Proxy", 380: "Alternative Service",
	400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found",
	405: "Method Not Allowed", 406: "Not Acceptable", 407: "Proxy Authentication Required", 408: "Request Timeout",
	410: "Gone", 412: "Conditional Request Failed", 413: "Request Entity Too Large", 414: "Request-URI Too Long",
	415: "Unsupported Media Type", 416: "Unsupported URI Scheme", 417: "Unknown Resource-Priority",
	420: "Bad Extension", 421: "Extension Required", 422: "Session Interval Too Small", 423: "Interval Too Brief",
	424: "Bad Location Information", 428: "Use Identity Header", 429: "Provide Referrer Identity",
	430: "Flow Failed", 433: "Anonymity Disallowed", 436: "Bad Identity-Info", 437: "Unsupported Certificate",
	438: "Invalid Identity Header", 439: "First Hop Lacks Outbound Support", 440: "Max-Breadth Exceeded",
	469: "Bad Info Package", 470: "Consent Needed",
	480: "Temporarily Unavailable", 481: "Call/Transaction Does Not Exist", 482: "Loop Detected",
	483: "Too Many Hops", 484: "Address Incomplete", 485: "Ambiguous", 486: "Busy Here", 487: "Request Terminated",
	488: "Not Acceptable Here", 489: "Bad Event", 491: "Request Pending", 493: "Undecipherable",
	494: "Security Agreement Required",
	500: "Server Internal Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
	504: "Server Time-out", 505: "Version Not Supported", 513: "Message Too Large", 555: "Push Notification Service Not Supported",
	580: "Precondition Failure",
	600: "Busy Everywhere", 603: "Decline", 604: "Does Not Exist Anywhere", 606: "Not Acceptable", 607: "Unwanted",
	608: "Rejected",
}

// Phrase returns the standard reason phrase of a SIP status code. A code
// without a registered phrase gets its class's (RFC 3261 section 21: an
// unknown code is treated as x00), so a response never reads "200 Error".
func Phrase(code int) string {
	if p, ok := phrases[code]; ok {
		return p
	}
	switch {
	case code >= 100 && code < 200:
		return "Trying"
	case code >= 200 && code < 300:
		return "OK"
	case code >= 300 && code < 400:
		return "Multiple Choices"
	case code >= 400 && code < 500:
		return "Bad Request"
	case code >= 500 && code < 600:
		return "Server Internal Error"
	case code >= 600 && code < 700:
		return "Global Failure"
	}
	return "Unknown"
}

// Response builds a response to req with code and its standard phrase.
func Response(req *sip.Request, code int) *sip.Response {
	return sip.NewResponseFromRequest(req, code, Phrase(code), nil)
}

// Supported lists the SIP option tags (RFC 3261 section 19.2) the PBX
// implements: timer (RFC 4028 session timers) and replaces (RFC 3891, an
// INVITE taking over a dialog). 100rel (RFC 3262) is not supported, so
// provisional responses are never sent reliably.
var Supported = []string{"timer", "replaces"}

// UnsupportedRequire returns the option tags of req's Require headers the
// PBX does not implement (RFC 3261 section 8.2.2.3). ACK and CANCEL are
// never refused for their Require header.
func UnsupportedRequire(req *sip.Request) []string {
	if req.IsAck() || req.IsCancel() {
		return nil
	}
	var out []string
	for _, h := range Headers(req, "Require") {
		for _, tag := range strings.Split(h.Value(), ",") {
			tag = strings.TrimSpace(tag)
			if tag == "" || containsFold(Supported, tag) || containsFold(out, tag) {
				continue
			}
			out = append(out, tag)
		}
	}
	return out
}

// BadExtension is the 420 (Bad Extension) response to a request requiring
// the option tags in unsupported, which it names in Unsupported (RFC 3261
// section 8.2.2.3; for 100rel RFC 3262 section 3).
func BadExtension(req *sip.Request, unsupported []string) *sip.Response {
	res := Response(req, sip.StatusBadExtension)
	res.AppendHeader(sip.NewHeader("Unsupported", strings.Join(unsupported, ", ")))
	return res
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
