package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// CSP is the page's Content-Security-Policy: its own script, style and API,
// nothing inline, nothing from elsewhere, never framed.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// Asset returns the named file ("" is the page itself) with its content
// type; ok is false for a name that is not one of the dashboard's files.
func Asset(name string) (body []byte, contentType string, ok bool) {
	if name == "" {
		name = "index.html"
	}
	if strings.Contains(name, "/") || strings.HasPrefix(name, ".") {
		return nil, "", false
	}
	ct, known := types[path.Ext(name)]
	if !known {
		return nil, "", false
	}
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		return nil, "", false
	}
	return b, ct, true
}

// Headers sets the security headers every dashboard response carries.
func Headers(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
}
