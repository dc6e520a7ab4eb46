package prompts

import (
	"slices"
	"strconv"
)

// Beep is the name of the record tone: a synthesised tone, not speech.
const Beep = "vm-beep"

// sentences are the spoken voicemail prompts, in the wording an Asterisk
// app_voicemail user expects.
var sentences = map[string]string{
	"vm-greeting":        "The person you are calling is not available. Please leave a message after the tone.",
	"vm-full":            "This mailbox is full. Goodbye.",
	"vm-enter-pin":       "Enter your PIN, then press pound.",
	"vm-wrong-pin":       "That PIN is incorrect.",
	"vm-enter-mailbox":   "Enter the mailbox number, then press pound.",
	"vm-you-have":        "You have",
	"vm-new":             "new",
	"vm-saved":           "saved",
	"vm-messages":        "messages",
	"vm-message":         "message",
	"vm-no-messages":     "You have no messages.",
	"vm-menu":            "Press 1 to listen to your messages. Press 0 for mailbox options. Press star for help. Press pound to exit.",
	"vm-mailbox-options": "Press 1 to record a greeting, 2 to erase it.",
	"vm-message-options": "Press 5 to repeat, 6 for next, 7 to delete, 9 to save.",
	"vm-help":            "During a message, press 5 to repeat, 7 to delete, 9 to save.",
	"vm-deleted":         "Message deleted.",
	"vm-saved-ok":        "Message saved.",
	"vm-goodbye":         "Goodbye.",
	"vm-record-greeting": "Record your greeting after the tone, then press pound.",
	"vm-greeting-erased": "Your greeting has been erased.",
	"vm-from":            "from",
	"vm-received":        "received",
	"vm-invalid":         "That is not a valid option.",
	"hundred":            "hundred",
	"oh":                 "oh",
	"am":                 "A.M.",
	"pm":                 "P.M.",
	"at":                 "at",
	"today":              "today",
	"yesterday":          "yesterday",
}

var (
	units    = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"}
	tens     = []string{"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"}
	weekdays = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
	months   = []string{"january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"}
)

// Texts returns every prompt's name and the English text it speaks; the
// beep has no text (it is a tone).
func Texts() map[string]string {
	m := make(map[string]string, len(sentences)+60)
	for k, v := range sentences {
		m[k] = v
	}
	for i, w := range units {
		m[strconv.Itoa(i)] = w
	}
	for i, w := range tens {
		m[strconv.Itoa(20+10*i)] = w
	}
	for _, w := range append(slices.Clone(weekdays), months...) {
		m[w] = w
	}
	return m
}

// Names lists every prompt of the standard set, sorted.
func Names() []string {
	t := Texts()
	names := make([]string, 0, len(t)+1)
	for k := range t {
		names = append(names, k)
	}
	names = append(names, Beep)
	slices.Sort(names)
	return names
}
