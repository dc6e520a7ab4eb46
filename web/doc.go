// Package web serves the HTTP management API: the listener (plain or TLS),
// the chi router built from the route table of package web/api, and the
// middleware every request passes through: request id, panic recovery,
// CORS, bearer-token authentication, the failed-authentication bucket per
// socket peer, the per-token rate limit, scope and tenant checks, strict
// query strings, and the audit log of operator actions.
//
// Order of checks for a request: an unknown path answers 404 and a known
// path with a wrong method 405 (with Allow) before credentials are looked
// at, so that 401 versus 404 reveals nothing. Then the bearer token: a
// valid one goes on; a missing, wrong or expired one is charged to the
// peer's failed-authentication bucket and answered 401, or 429 while the
// bucket is empty (so a guesser gets 10 answers a minute). A valid token is
// never refused for its address's failures: a local process guessing
// cannot lock the operator out. Then the token's
// bucket (429), the route's scope and process-global data (403), the query
// string (400, or 403 for a ?tenant= outside the token's tenants), and the
// handler.
//
// Credentials: a token is configured as plaintext or as sha256:<hex>; both
// are kept as SHA-256 digests, the presented token is hashed and compared
// with every configured digest in constant time without stopping at a
// match. Only token names reach the logs. SetCredentials swaps the whole
// set atomically and keeps the running one when the new set is invalid.
//
// TLS: certificate files are re-read every reloadEvery; a renewed
// certificate is served without a restart and broken files keep the
// previous certificates (and are logged). Several certificates are chosen
// by SNI; clientCaFile turns on mutual TLS for every connection.
//
// Caveats: the failed-authentication table holds at most maxPeers
// addresses; when it is full, entries whose bucket has refilled are
// dropped first, then arbitrary ones, so memory stays bounded under a
// spray of source addresses at the cost of forgetting some of them.
package web
