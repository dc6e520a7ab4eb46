// Package dialplan runs a call's steps from the routing result: it turns
// a routing.Result into what b2bua does with the call (fork to the
// registered contacts of an extension or of a ring group's extensions,
// one INVITE to a trunk, or a local application such as a voicemail
// deposit or the mailbox menu), chains a next step after a failed dial
// (an extension with a mailbox that is busy, does not answer or has no
// registered phone hands the caller to its mailbox), reserves the call
// under security.limits, presents the caller's identity, identifies trunk
// INVITEs by source address, and keeps each live call's steps for its
// call record (Steps).
package dialplan
