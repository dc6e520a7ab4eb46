// Package voicemail stores voicemail messages and runs the two local
// applications that use them: deposit (greeting, tone, record) and
// retrieval (the DTMF menu of DESIGN.md 5.7).
//
// Messages live under <dataDir>/<tenant>/voicemail/<extension>/ as <id>.wav
// and <id>.json, where id is the call record's id of the call that left the
// message; the mailbox's own greeting is greeting.wav in the same
// directory. Audio is streamed to a temporary file while it is recorded, so
// that a crash keeps what was said: Open promotes such a file.
//
// Wiring (the composition root does it): Open a Store when a tenant has
// mailboxes; run Store.Janitor with voicemail.retention; build one Settings
// (Store, the prompt set, the System voicemail block, the tenants' time
// zones, the guard's authentication-failure counter); route a call to
// NewDeposit(settings, tenant, mailbox) and a feature code to
// NewRetrieval(settings, tenant, tenant.Mailboxes, ownExtension) (own
// mailbox, *97) or NewRetrieval(settings, tenant, tenant.Mailboxes, "")
// (asks for a mailbox, *98).
//
// What the prompts say, as this package plays them:
//
//	vm-greeting         the standard greeting ("... is not available, leave a message after the tone")
//	vm-beep             the tone before recording
//	vm-full             "this mailbox is full" (the call then ends)
//	vm-enter-mailbox    "mailbox number, then pound"
//	vm-enter-pin        "password, then pound"
//	vm-wrong-pin        "login incorrect"
//	vm-you-have, vm-new, vm-saved, vm-messages
//	                    "you have" 3 "new" "messages" 2 "saved" "messages"
//	vm-no-messages      "no messages" (also: no more messages)
//	vm-menu             "press 1 to hear your messages, 0 for mailbox options, star for help, pound to exit"
//	vm-help             a longer description of the menus
//	vm-message, vm-received, vm-from
//	                    "message" 1 "received" today "at" 3 oh 5 pm "from" 5 5 5 ...
//	vm-message-options  "4 previous, 5 repeat, 6 next, 7 delete, 9 save, pound for the menu"
//	vm-deleted          "message deleted"
//	vm-saved-ok         "message saved" (also after recording a greeting)
//	vm-record-greeting  the options menu: "press 1 to record your greeting, 2 to erase it, pound to go back"
//	vm-greeting-erased  "your greeting was erased"
//	vm-invalid          "that is not a valid choice"
//	vm-goodbye          "goodbye"
package voicemail
