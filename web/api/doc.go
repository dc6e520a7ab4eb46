// Package api holds the management API handlers behind /v1: the route
// table (method, pattern, scope, accepted query parameters), the objects
// they return, the interfaces of the components they read and act on, the
// strict query-string parser, and the one place where errors become HTTP
// status codes and the {"error":{code,message,request_id}} envelope.
//
// It does not own the server, authentication or rate limiting: package web
// builds the chi router from Resources, authenticates the bearer token,
// checks scopes and tenant-restricts the request before a handler runs,
// and stores the caller as a Principal in the request context.
//
// Tenant restriction is applied twice: on the query (a ?tenant= outside
// the caller's tenants is 403, a record addressed by id under another
// tenant is 404) and again on every row a component returns, so a
// component that ignores the filter still cannot leak another tenant's
// data. Trunks with no tenant are shared and visible to every caller.
//
// A nil component in Backends means the component is not running; its
// routes answer 404 not_found saying so, after authentication and scope
// checks. Recordings run only when recording is on somewhere; voicemail
// and mobile devices have no component yet and always answer that way.
// With api.recordings.presign set every recording audio request answers
// 500; otherwise the audio is served with Range requests and an ETag from
// its sha256.
package api
