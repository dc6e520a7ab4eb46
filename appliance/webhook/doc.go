// Package webhook delivers signed events to the tenants' backends
// (DESIGN.md 5.3): one POST per subscribed Webhook document, with a JSON
// body {id, event, created_at, tenant, data} and the X-Pbx-Event,
// X-Pbx-Delivery, X-Pbx-Timestamp and X-Pbx-Signature headers (v1=hex
// HMAC-SHA256 of timestamp "." body under the webhook's secret).
//
// A 2xx answer is success; anything else, or no answer within the
// timeout, is retried from 1 second doubling to 5 minutes, with jitter,
// until the delivery is maxAttemptAge old (60 seconds for
// mobile.ringing). At most webhooks.concurrency attempts run at once
// across tenants, shared fairly: a tenant whose endpoint is slow holds at
// most three quarters of the slots and the free slot goes to the tenant
// with the fewest attempts in flight, so it cannot starve another.
//
// call.ended deliveries are durable: each is written under
// <dataDir>/webhooks/pending/ before its first attempt and removed once a
// 2xx confirmed it (or it expired), so a restart or a crash loses none; a
// crash between the 2xx and the removal sends it again with the same
// delivery id, which is the receiver's key to drop the duplicate.
package webhook
