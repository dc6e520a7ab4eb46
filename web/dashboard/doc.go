// Package dashboard serves the embedded live dashboard: one HTML page, its
// style sheet and script, with nothing fetched from elsewhere and no build
// step. The files are public; every datum the page shows comes from the
// authenticated API (the event stream, hang-up and ban lifting) with the
// token the user types, kept in the browser's session storage and sent
// only in the Authorization header.
package dashboard
